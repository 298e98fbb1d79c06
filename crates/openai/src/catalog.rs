//! Which models of the repository this port serves, and how each is spoken to. A model is
//! an LLM when it takes `text_input` and gives `text_output` (the convention of Triton's
//! vLLM and TensorRT-LLM backends); an embedding model when its config says
//! `parameters { key: "openai_task" value: { string_value: "embeddings" } }` or it takes
//! vLLM's `embedding_request`. The tensor convention is chosen as Triton's frontend
//! chooses it: the model's `backend` (`vllm`, or anything else for the one-tensor-per-
//! parameter TensorRT-LLM convention), unless `--openai-backend` overrides it; a model that
//! declares `sampling_parameters` speaks vLLM's whatever its backend.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use nereid_chat::ModelText;
use nereid_core::model::ModelSpec;
use nereid_core::Server;
use parking_lot::Mutex;

use crate::error::{ApiError, ApiResult};

/// How generation requests reach a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convention {
    /// Triton's vLLM backend: `text_input`, `stream`, `sampling_parameters` (JSON),
    /// `exclude_input_in_output`, `return_*` flags.
    Vllm,
    /// Triton's TensorRT-LLM models: one tensor per parameter (`max_tokens`,
    /// `temperature`, `stop_words`, ...), only those the model declares.
    TensorRtLlm,
}

/// What a model does for this port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Completions and chat.
    Generate(Convention),
    /// vLLM's embedding convention: `embedding_request` (JSON) in, JSON out.
    EmbedJson,
    /// A tokenizer and a transformer: token ids and attention mask in, hidden states or a
    /// pooled vector out; pooling and normalization done here.
    EmbedTokens,
}

/// `--openai-backend`: the convention to use for every LLM, whatever its `backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendOverride {
    /// vLLM's convention.
    Vllm,
    /// TensorRT-LLM's convention.
    TensorRtLlm,
}

/// The task of `spec`, or `None` when this port does not serve it.
pub fn task_of(spec: &ModelSpec, forced: Option<BackendOverride>) -> Option<Task> {
    let has_input = |name: &str| spec.inputs.iter().any(|t| t.name == name);
    let has_output = |name: &str| spec.outputs.iter().any(|t| t.name == name);
    let openai_task = spec.parameters.get("openai_task").map(String::as_str);
    if openai_task == Some("embeddings") {
        return Some(if has_input("embedding_request") {
            Task::EmbedJson
        } else {
            Task::EmbedTokens
        });
    }
    if has_input("embedding_request") {
        return Some(Task::EmbedJson);
    }
    if !(has_input("text_input") && has_output("text_output")) {
        return None;
    }
    let convention = match forced {
        Some(BackendOverride::Vllm) => Convention::Vllm,
        Some(BackendOverride::TensorRtLlm) => Convention::TensorRtLlm,
        None if spec.config.backend == "vllm" || has_input("sampling_parameters") => {
            Convention::Vllm
        }
        None => Convention::TensorRtLlm,
    };
    Some(Task::Generate(convention))
}

/// A served model: its spec, task and text side (tokenizer, chat template).
pub struct Served {
    /// The ready version's spec.
    pub spec: Arc<ModelSpec>,
    /// What it does here.
    pub task: Task,
    /// Its tokenizer and chat template, when its folder or `--tokenizer` has them.
    pub text: Option<Arc<ModelText>>,
}

/// A model version: name and version number.
type VersionKey = (String, i64);

/// The port's view of the repository: tasks are read from each request's model spec;
/// tokenizers are read once per model version and kept (a reload makes a new version
/// key only when its number changes; `forget` drops a model's entries on demand).
pub struct Catalog {
    server: Arc<Server>,
    forced: Option<BackendOverride>,
    /// `--tokenizer`: the folder used for models that have no tokenizer of their own.
    fallback_tokenizer: Option<PathBuf>,
    // (model, version) -> text side; filled on first use, read by every request. The lock
    // is held only to look up or insert, never across a file read.
    texts: Mutex<HashMap<VersionKey, Option<Arc<ModelText>>>>,
    /// Held by `/v1/models/{name}/load` and `/unload` for the whole check-then-act, so
    /// of concurrent loads of one model exactly one loads and the others see it loaded
    /// (Triton's frontend holds its metadata lock the same way). An async lock: it is
    /// held across the load, which waits for the model to be ready.
    pub(crate) management: tokio::sync::Mutex<()>,
}

impl Catalog {
    /// A catalog over `server`'s repository.
    pub fn new(
        server: Arc<Server>,
        forced: Option<BackendOverride>,
        fallback_tokenizer: Option<PathBuf>,
    ) -> Self {
        Self {
            server,
            forced,
            fallback_tokenizer,
            texts: Mutex::default(),
            management: tokio::sync::Mutex::default(),
        }
    }

    /// The server requests go to.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// Every ready model of the repository by name (highest ready version of each),
    /// whatever its task: `/v1/models` lists them all, as Triton's frontend does.
    pub fn ready(&self) -> Vec<Arc<ModelSpec>> {
        let mut ready: Vec<Arc<ModelSpec>> = Vec::new();
        for model in self.server.repository().ready_models() {
            let spec = model.spec().clone();
            match ready.iter_mut().find(|s| s.name == spec.name) {
                Some(entry) if entry.version < spec.version => *entry = spec,
                Some(_) => {}
                None => ready.push(spec),
            }
        }
        ready.sort_by(|a, b| a.name.cmp(&b.name));
        ready
    }

    /// The ready model `name` with its task; Triton's 400 "Unknown model" when no such
    /// model is ready, a 400 naming it when it is one this port cannot use.
    pub async fn get(&self, name: &str) -> ApiResult<Served> {
        let spec = self
            .server
            .model_spec(name, None)
            .map_err(|_| ApiError::unknown_model(name))?;
        let task = task_of(&spec, self.forced).ok_or_else(|| {
            ApiError::invalid_param(
                "model",
                format!(
                    "The model `{name}` is neither an LLM (text_input in, text_output out) \
                     nor an embedding model."
                ),
            )
        })?;
        let text = self.text_of(&spec).await?;
        Ok(Served { spec, task, text })
    }

    /// The tokenizer and template of a model version: `tokenizer.json` and
    /// `tokenizer_config.json` in the model's folder, else in `--tokenizer`'s.
    async fn text_of(&self, spec: &ModelSpec) -> ApiResult<Option<Arc<ModelText>>> {
        let key = (spec.name.clone(), spec.version);
        if let Some(known) = self.texts.lock().get(&key) {
            return Ok(known.clone());
        }
        let own = self
            .server
            .repository()
            .model_directory(&spec.name)
            .await
            .ok();
        let fallback = self.fallback_tokenizer.clone();
        let name = spec.name.clone();
        let found = tokio::task::spawn_blocking(move || read_text(&name, own, fallback))
            .await
            .map_err(|e| ApiError::internal(format!("reading the tokenizer: {e}")))??;
        self.texts.lock().insert(key, found.clone());
        Ok(found)
    }
}

/// Reads a model's text side from its own folder, else from the fallback folder.
fn read_text(
    name: &str,
    own: Option<PathBuf>,
    fallback: Option<PathBuf>,
) -> ApiResult<Option<Arc<ModelText>>> {
    for dir in own.into_iter().chain(fallback) {
        match ModelText::from_dir(&dir) {
            Ok(Some(text)) => return Ok(Some(Arc::new(text))),
            Ok(None) => continue,
            Err(e) => {
                return Err(ApiError::internal(format!(
                    "the tokenizer of model '{name}' in {} cannot be read: {e}",
                    dir.display()
                )))
            }
        }
    }
    Ok(None)
}
