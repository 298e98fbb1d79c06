//! The OpenAI-compatible frontend: `/v1/models`, `/v1/completions`,
//! `/v1/chat/completions` and `/v1/embeddings` on their own port (`--openai-port`), in the
//! same process as KServe HTTP and gRPC. Like those frontends it decodes, makes ordinary
//! inference requests on the core facade and encodes: an LLM of the repository is any
//! model in the tensor convention of Triton's vLLM or TensorRT-LLM backends
//! ([`catalog`]); the text side (tokenizer, chat template, tool calls) is `nereid-chat`'s.
//!
//! Where Triton's Python frontend is weak this one differs, and says so in the docs
//! (docs/src/features/llm.md):
//! unknown fields are accepted (unless `--openai-strict`), every error has OpenAI's
//! shape, `finish_reason` says `length` when the token budget ran out, a client that
//! disconnects cancels its request at once, and each model may bring its own tokenizer.
//! Every generation is measured here ([`metrics`]): time to first token, time per output
//! token, tokens and finish reasons per model, with the names Triton's vLLM backend uses.

mod body;
pub mod catalog;
mod chat;
mod choices;
mod completions;
mod embeddings;
pub mod error;
mod generate;
pub mod metrics;
pub mod restricted;
mod routes;
pub mod schema;
mod sse;
mod stop;
pub mod tensors;

#[cfg(test)]
mod fuzz_tests;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::Router;
use nereid_chat::tools::ToolCallParser;
use nereid_core::Server;

pub use catalog::BackendOverride;
use catalog::Catalog;
use error::{ApiError, ApiResult};
pub use metrics::LlmMetrics;

/// Triton's frontend's default request size limit (64 MiB).
pub const DEFAULT_MAX_REQUEST_SIZE: usize = 64 * 1024 * 1024;
/// `max_tokens` when a request gives none (`--default-max-tokens`, Triton's 16).
pub const DEFAULT_MAX_TOKENS: u32 = 16;
/// Triton's frontend's cap on the text the streaming tool-call parser holds (128 KiB).
pub const DEFAULT_MAX_TOOL_CALL_PARSE_BYTES: usize = 128 * 1024;

/// The largest request body the port reads, and the flag a client is told to raise:
/// Triton's frontend takes it from `--http-max-input-size` (64 MiB), as Nereid does
/// unless `--openai-max-request-size` sets the port's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit {
    /// Bytes.
    pub bytes: usize,
    /// The flag that set it, for the 413's message.
    pub flag: &'static str,
}

impl Default for BodyLimit {
    fn default() -> Self {
        Self {
            bytes: DEFAULT_MAX_REQUEST_SIZE,
            flag: "--http-max-input-size",
        }
    }
}

/// The port's settings.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    /// API keys a request must present as `Authorization: Bearer <key>`; empty lets
    /// every request in (`--openai-api-key`, `--openai-api-key-file`).
    pub api_keys: HashSet<String>,
    /// Refuse request fields this frontend does not know (`--openai-strict`).
    pub strict: bool,
    /// Endpoint groups that need a header's value (`--openai-restricted-api`).
    pub restricted_apis: restricted::Restrictions,
    /// Largest request body, and the flag that set it.
    pub max_request_size: BodyLimit,
    /// `max_tokens` of requests that give none (`--default-max-tokens`).
    pub default_max_tokens: u32,
    /// How tool calls are read from generated text (`--tool-call-parser`).
    pub tool_call_parser: Option<ToolCallParser>,
    /// Most bytes of one streamed choice the tool-call parser reads; past it the choice
    /// ends with `length` and its generation is cancelled (`--max-tool-call-parse-bytes`).
    pub max_tool_call_parse_bytes: usize,
    /// The tokenizer folder for models without their own (`--tokenizer`).
    pub tokenizer: Option<PathBuf>,
    /// The tensor convention for every LLM (`--openai-backend`).
    pub backend: Option<BackendOverride>,
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        Self {
            api_keys: HashSet::new(),
            strict: false,
            restricted_apis: restricted::Restrictions::default(),
            max_request_size: BodyLimit::default(),
            default_max_tokens: DEFAULT_MAX_TOKENS,
            tool_call_parser: None,
            max_tool_call_parse_bytes: DEFAULT_MAX_TOOL_CALL_PARSE_BYTES,
            tokenizer: None,
            backend: None,
        }
    }
}

/// What every handler reads.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) options: Arc<OpenAiOptions>,
    /// The metrics text of the server (the same the metrics port serves).
    pub(crate) metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// The LLM metrics every choice counts into (rendered by whoever renders `metrics`).
    pub(crate) llm: Arc<LlmMetrics>,
}

impl AppState {
    /// Refuses a request without one of the configured API keys (none configured: all
    /// pass).
    pub(crate) fn authorize(&self, headers: &HeaderMap) -> ApiResult<()> {
        if self.options.api_keys.is_empty() {
            return Ok(());
        }
        let presented = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match presented {
            Some(key) if self.options.api_keys.contains(key) => Ok(()),
            _ => Err(ApiError::unauthorized()),
        }
    }

    /// The server.
    pub(crate) fn server(&self) -> &Arc<Server> {
        self.catalog.server()
    }
}

/// The port's routes over `server`; `metrics` renders the server's Prometheus text for
/// the port's `/metrics`, followed there by the port's own LLM metrics ([`metrics`]).
pub fn router(
    server: Arc<Server>,
    options: OpenAiOptions,
    metrics: Arc<dyn Fn() -> String + Send + Sync>,
) -> Router {
    let llm = Arc::new(LlmMetrics::default());
    let rendered = llm.clone();
    let text = Arc::new(move || {
        let mut text = metrics();
        rendered.render(&mut text);
        text
    });
    router_with_llm_metrics(server, options, text, llm)
}

/// [`router`] for a caller that renders the LLM metrics itself: every generation counts
/// into `llm`, and `metrics` (the port's `/metrics`) must include them, as the binary's
/// metrics text does for the metrics port and this port alike.
pub fn router_with_llm_metrics(
    server: Arc<Server>,
    options: OpenAiOptions,
    metrics: Arc<dyn Fn() -> String + Send + Sync>,
    llm: Arc<LlmMetrics>,
) -> Router {
    let catalog = Catalog::new(server, options.backend, options.tokenizer.clone());
    routes::router(AppState {
        catalog: Arc::new(catalog),
        options: Arc::new(options),
        metrics,
        llm,
    })
}
