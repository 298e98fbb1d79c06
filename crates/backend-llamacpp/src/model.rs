//! A GGUF model loaded once per model version and shared by its instances' engines
//! (the weights are read-only; each engine has its own context and KV cache).

use std::num::NonZeroU32;
use std::sync::{Mutex, OnceLock};

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::LogOptions;
use nereid_core::{Error, Result};

use crate::engine_args::EngineArgs;

/// One loaded GGUF model and the arguments its engines run with.
pub struct Llm {
    /// The model's name, for messages.
    pub name: String,
    /// The weights and vocabulary.
    pub model: LlamaModel,
    /// `model.json`.
    pub args: EngineArgs,
    /// Tokens one sequence may hold.
    pub context_length: u32,
}

/// llama.cpp's process-wide state: initialized once (a second init fails), its log lines
/// sent to `tracing` so they follow `--log-*` instead of going to stderr.
fn backend() -> Result<&'static LlamaBackend> {
    static BACKEND: OnceLock<std::result::Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::internal(format!("unable to initialize llama.cpp: {e}")))
}

impl Llm {
    /// Reads the GGUF file `args.gguf` for model `name`.
    pub fn load(name: &str, args: EngineArgs) -> Result<Self> {
        let gguf = &args.gguf;
        if !gguf.is_file() {
            return Err(Error::invalid_arg(format!(
                "model '{name}': the GGUF file {} does not exist",
                gguf.display()
            )));
        }
        let model = LlamaModel::load_from_file(backend()?, gguf, &LlamaModelParams::default())
            .map_err(|e| {
                Error::invalid_arg(format!(
                    "model '{name}': unable to load the GGUF file {}: {e} (see the log for llama.cpp's reason)",
                    gguf.display()
                ))
            })?;
        let trained = model.n_ctx_train();
        let context_length = args.context_for(trained);
        if context_length > trained {
            return Err(Error::invalid_arg(format!(
                "model '{name}': 'context_length' {context_length} is more than the {trained} tokens the model was trained on"
            )));
        }
        Ok(Self {
            name: name.to_string(),
            model,
            args,
            context_length,
        })
    }

    /// A context with one KV-cache slot of [`Self::context_length`] tokens per sequence.
    pub fn new_context(&self) -> Result<LlamaContext<'_>> {
        // llama.cpp may adjust the model while creating a context, so two instances
        // of one model must not create theirs at the same time.
        static CREATING: Mutex<()> = Mutex::new(());
        let _one_at_a_time = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        let args = &self.args;
        let total = self.context_length.saturating_mul(args.max_num_seqs);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(total))
            .with_n_batch(args.batch_size)
            .with_n_ubatch(args.batch_size.min(512))
            .with_n_seq_max(args.max_num_seqs)
            .with_kv_unified(false)
            .with_n_threads(args.threads as i32)
            .with_n_threads_batch(args.threads_batch as i32);
        self.model.new_context(backend()?, params).map_err(|e| {
            Error::internal(format!(
                "model '{}': unable to create a llama.cpp context of {total} tokens ({} sequences of {}): {e}",
                self.name, args.max_num_seqs, self.context_length
            ))
        })
    }

    /// The prompt's tokens (a BOS first when the model asks for one, special tokens
    /// written in the text read as such, as llama.cpp's server reads prompts); a prompt
    /// that leaves no room to generate is refused naming both lengths.
    pub fn tokenize(&self, prompt: &str) -> Result<Vec<LlamaToken>> {
        let tokens = self.model.vocab().tokenize(prompt.as_bytes(), true, true);
        if tokens.len() >= self.context_length as usize {
            return Err(Error::invalid_arg(format!(
                "the prompt is {} tokens long, but model '{}' holds at most {} tokens per sequence (prompt and output; 'context_length' in model.json)",
                tokens.len(),
                self.name,
                self.context_length
            )));
        }
        Ok(tokens)
    }
}
