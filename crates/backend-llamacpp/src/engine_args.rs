//! `<model>/<version>/model.json`: the engine's arguments, where Triton's vLLM backend
//! keeps vLLM's. A vLLM user migrating changes `backend: "vllm"` to `"llamacpp"` and
//! writes this file for a GGUF model. Every key is read or refused: a key this backend
//! does not know (a vLLM-only one such as `gpu_memory_utilization`, or a typo) fails the
//! load naming it, instead of being accepted and ignored.

use std::path::{Path, PathBuf};

use nereid_core::{Error, Result};
use serde_json::{Map, Value};

/// Sequences generated at once when `model.json` gives no `max_num_seqs`.
const DEFAULT_MAX_NUM_SEQS: u32 = 4;
/// Requests waiting for a free sequence slot, per instance, when not given.
const DEFAULT_MAX_QUEUE_SIZE: u32 = 64;
/// Tokens per sequence (prompt and output) when not given and the model was trained on more.
const DEFAULT_CONTEXT_LENGTH: u32 = 4096;
/// Tokens one decode step takes in all (llama.cpp's own default `n_batch`).
const DEFAULT_BATCH_SIZE: u32 = 2048;
/// Prompt tokens one sequence may add per step, so a long prompt is taken in pieces and
/// the sequences already generating keep getting a token every step.
const DEFAULT_PREFILL_CHUNK: u32 = 256;

/// The keys `model.json` may hold.
const KEYS: [&str; 9] = [
    "model",
    "context_length",
    "max_num_seqs",
    "max_queue_size",
    "threads",
    "threads_batch",
    "batch_size",
    "prefill_chunk",
    "seed",
];

/// The arguments as written, before defaults.
struct RawArgs {
    model: String,
    context_length: Option<u32>,
    max_num_seqs: Option<u32>,
    max_queue_size: Option<u32>,
    threads: Option<u32>,
    threads_batch: Option<u32>,
    batch_size: Option<u32>,
    prefill_chunk: Option<u32>,
    seed: Option<u32>,
}

/// The engine's arguments, defaults applied and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineArgs {
    /// The GGUF file (`model`, relative to the version folder).
    pub gguf: PathBuf,
    /// Tokens one sequence may hold, prompt and output together; `None` means the
    /// smaller of the model's training context and 4096, decided once the model is read.
    pub context_length: Option<u32>,
    /// Sequences generated together (KV-cache slots).
    pub max_num_seqs: u32,
    /// Requests waiting for a slot beyond which new ones are refused.
    pub max_queue_size: u32,
    /// Threads generating tokens.
    pub threads: u32,
    /// Threads reading prompts.
    pub threads_batch: u32,
    /// Tokens per decode step in all.
    pub batch_size: u32,
    /// Prompt tokens per sequence per step.
    pub prefill_chunk: u32,
    /// The sampling seed of requests that give none; `None` draws one per request.
    pub seed: Option<u32>,
}

impl EngineArgs {
    /// Reads `model.json` at `path` for model `model`: every error names the file and,
    /// for a bad key or value, the key.
    pub fn read(model: &str, path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid_arg(format!(
                "model '{model}': unable to read the engine arguments {}: {e}",
                path.display()
            ))
        })?;
        Self::parse(model, path, &text)
    }

    /// [`Self::read`] on text already read.
    pub fn parse(model: &str, path: &Path, text: &str) -> Result<Self> {
        let invalid = |what: String| {
            Error::invalid_arg(format!(
                "model '{model}': {what} in the engine arguments {}",
                path.display()
            ))
        };
        let fields: Map<String, Value> =
            serde_json::from_str(text).map_err(|e| invalid(format!("not a JSON object ({e})")))?;
        if let Some(unknown) = fields.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(invalid(format!(
                "unknown key '{unknown}' (the llamacpp backend reads {})",
                KEYS.join(", ")
            )));
        }
        let number = |key: &str| -> Result<Option<u32>> {
            match fields.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .map(Some)
                    .ok_or_else(|| {
                        invalid(format!("'{key}' must be a non-negative integer, got {v}"))
                    }),
            }
        };
        let raw = RawArgs {
            model: match fields.get("model") {
                Some(Value::String(m)) if !m.is_empty() => m.clone(),
                _ => {
                    return Err(invalid(
                        "'model' (the GGUF file) must be given as a path".into(),
                    ))
                }
            },
            context_length: number("context_length")?,
            max_num_seqs: number("max_num_seqs")?,
            max_queue_size: number("max_queue_size")?,
            threads: number("threads")?,
            threads_batch: number("threads_batch")?,
            batch_size: number("batch_size")?,
            prefill_chunk: number("prefill_chunk")?,
            seed: number("seed")?,
        };
        let version_dir = path.parent().unwrap_or(Path::new("."));
        let positive = |key: &str, value: Option<u32>, default: u32| -> Result<u32> {
            match value {
                Some(0) => Err(Error::invalid_arg(format!(
                    "model '{model}': '{key}' in {} must be at least 1",
                    path.display()
                ))),
                Some(v) => Ok(v),
                None => Ok(default),
            }
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let threads = positive("threads", raw.threads, cores)?;
        let batch_size = positive("batch_size", raw.batch_size, DEFAULT_BATCH_SIZE)?;
        let args = EngineArgs {
            gguf: version_dir.join(&raw.model),
            context_length: match raw.context_length {
                Some(_) => Some(positive("context_length", raw.context_length, 0)?),
                None => None,
            },
            max_num_seqs: positive("max_num_seqs", raw.max_num_seqs, DEFAULT_MAX_NUM_SEQS)?,
            max_queue_size: raw.max_queue_size.unwrap_or(DEFAULT_MAX_QUEUE_SIZE),
            threads,
            threads_batch: positive("threads_batch", raw.threads_batch, threads)?,
            batch_size,
            prefill_chunk: positive("prefill_chunk", raw.prefill_chunk, DEFAULT_PREFILL_CHUNK)?
                .min(batch_size),
            seed: raw.seed,
        };
        if args.max_num_seqs > batch_size {
            return Err(Error::invalid_arg(format!(
                "model '{model}': 'max_num_seqs' ({}) in {} is more than 'batch_size' ({batch_size}): every sequence needs a place in each step",
                args.max_num_seqs,
                path.display()
            )));
        }
        Ok(args)
    }

    /// The context length a model trained on `trained` tokens is served with.
    pub fn context_for(&self, trained: u32) -> u32 {
        self.context_length
            .unwrap_or_else(|| trained.clamp(1, DEFAULT_CONTEXT_LENGTH))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EngineArgs> {
        EngineArgs::parse("llm", Path::new("/m/llm/1/model.json"), text)
    }

    #[test]
    fn the_gguf_is_relative_to_the_version_folder_and_defaults_apply() {
        let args = parse(r#"{"model": "smol.gguf"}"#).expect("valid");
        assert_eq!(args.gguf, Path::new("/m/llm/1/smol.gguf"));
        assert_eq!(args.max_num_seqs, DEFAULT_MAX_NUM_SEQS);
        assert_eq!(args.max_queue_size, DEFAULT_MAX_QUEUE_SIZE);
        assert_eq!(args.threads_batch, args.threads);
        assert_eq!(args.context_for(8192), DEFAULT_CONTEXT_LENGTH);
        assert_eq!(args.context_for(2048), 2048);
        assert_eq!(args.seed, None);
    }

    #[test]
    fn every_key_is_read() {
        let args = parse(
            r#"{"model": "/abs/m.gguf", "context_length": 512, "max_num_seqs": 2,
                "max_queue_size": 0, "threads": 3, "threads_batch": 1, "batch_size": 64,
                "prefill_chunk": 128, "seed": 7}"#,
        )
        .expect("valid");
        assert_eq!(args.gguf, Path::new("/abs/m.gguf"));
        assert_eq!(args.context_for(8192), 512);
        assert_eq!((args.max_num_seqs, args.max_queue_size), (2, 0));
        assert_eq!((args.threads, args.threads_batch), (3, 1));
        assert_eq!(
            (args.batch_size, args.prefill_chunk),
            (64, 64),
            "chunk within a step"
        );
        assert_eq!(args.seed, Some(7));
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let e = parse(r#"{"model": "m.gguf", "gpu_memory_utilization": 0.5}"#)
            .expect_err("vLLM-only key");
        assert!(
            e.message().contains("unknown key 'gpu_memory_utilization'"),
            "{e}"
        );
        assert!(e.message().contains("/m/llm/1/model.json"), "{e}");
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            (r#"{"model": "m", "max_num_seqs": 0}"#, "'max_num_seqs'"),
            (r#"{"model": "m", "context_length": 0}"#, "'context_length'"),
            (r#"{"model": "m", "threads": -1}"#, "'threads'"),
            (r#"{"model": "m", "seed": "x"}"#, "'seed'"),
            (
                r#"{"model": "m", "max_num_seqs": 9, "batch_size": 8}"#,
                "'max_num_seqs'",
            ),
            (r#"{"context_length": 5}"#, "'model'"),
            ("[]", "not a JSON object"),
        ] {
            let e = parse(text).expect_err(text);
            assert!(e.message().contains(key), "{text}: {e}");
        }
    }
}
