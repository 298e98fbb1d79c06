//! The OpenAI-compatible port's flags. Triton's OpenAI frontend is a separate program
//! (`python/openai/openai_frontend/main.py`); its flags keep their names here where they
//! do not clash with tritonserver's (`--openai-port`, `--tokenizer`, `--tool-call-parser`,
//! `--default-max-tokens`), and its `--backend` is `--openai-backend`. The port is off
//! unless `--openai-port` is given, so no existing launch line opens a new port.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{ArgAction, Args};
use nereid_openai::{BackendOverride, BodyLimit, OpenAiOptions};

use super::values;

/// Flags of the OpenAI port.
#[derive(Debug, Args)]
pub struct OpenAiFlags {
    /// Serve the OpenAI API (`/v1/completions`, `/v1/chat/completions`, `/v1/embeddings`,
    /// `/v1/models`) on this port (Triton's frontend uses 9000; 0 picks a free one).
    /// Off when not given.
    #[arg(long, value_parser = values::integer::<u16>, help_heading = "OpenAI")]
    pub openai_port: Option<u16>,
    /// The OpenAI port's bind address.
    #[arg(long, default_value = "0.0.0.0", value_parser = values::address, help_heading = "OpenAI")]
    pub openai_address: IpAddr,
    /// An API key requests must present as `Authorization: Bearer <key>` (repeatable);
    /// without any key every request is let in.
    #[arg(long, help_heading = "OpenAI")]
    pub openai_api_key: Vec<String>,
    /// Restrict endpoint groups to requests with a header set to a value:
    /// `<api>[,<api>...] <header> <value>` (apis: inference, model-repository, metrics,
    /// health), repeatable, each group in one occurrence only.
    #[arg(long, num_args = 3, value_names = ["APIS", "HEADER", "VALUE"], action = ArgAction::Append, help_heading = "OpenAI")]
    pub openai_restricted_api: Vec<String>,
    /// A file of API keys, one per line (blank lines and `#` comments skipped).
    #[arg(long, help_heading = "OpenAI")]
    pub openai_api_key_file: Option<PathBuf>,
    /// Refuse request fields the frontend does not know (by default they are accepted,
    /// as OpenAI and vLLM accept them).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "OpenAI")]
    pub openai_strict: bool,
    /// Largest request body in bytes (default: `--http-max-input-size`, which is what
    /// Triton's OpenAI frontend reads).
    #[arg(long, help_heading = "OpenAI")]
    pub openai_max_request_size: Option<usize>,
    /// `max_tokens` of requests that give none.
    #[arg(long, default_value_t = nereid_openai::DEFAULT_MAX_TOKENS, help_heading = "OpenAI")]
    pub default_max_tokens: u32,
    /// How tool calls are read from generated text: llama3_json, mistral or hermes
    /// (needed for `tool_choice: auto`).
    #[arg(long, help_heading = "OpenAI")]
    pub tool_call_parser: Option<String>,
    /// Most bytes of generated text the streaming tool-call parser reads per choice;
    /// past it the choice ends with `finish_reason: length` and its generation is
    /// cancelled.
    #[arg(long, default_value_t = nereid_openai::DEFAULT_MAX_TOOL_CALL_PARSE_BYTES, value_parser = values::integer::<usize>, help_heading = "OpenAI")]
    pub max_tool_call_parse_bytes: usize,
    /// A folder with `tokenizer.json` / `tokenizer_config.json` for models whose own
    /// folder has none.
    #[arg(long, help_heading = "OpenAI")]
    pub tokenizer: Option<PathBuf>,
    /// The tensor convention of every LLM: vllm or tensorrtllm (default: by each model's
    /// backend).
    #[arg(long, help_heading = "OpenAI")]
    pub openai_backend: Option<String>,
}

impl OpenAiFlags {
    /// The port's options, reading the key file; `http_max_input_size` is the body limit
    /// unless `--openai-max-request-size` sets one. Fails on an unknown parser or
    /// convention name, or an unreadable key file.
    pub fn options(&self, http_max_input_size: usize) -> anyhow::Result<OpenAiOptions> {
        let mut api_keys: HashSet<String> = self.openai_api_key.iter().cloned().collect();
        if let Some(path) = &self.openai_api_key_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --openai-api-key-file {}", path.display()))?;
            api_keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_string),
            );
        }
        let tool_call_parser = self
            .tool_call_parser
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--tool-call-parser: {e}"))?;
        let restricted: Vec<(String, String, String)> = self
            .openai_restricted_api
            .chunks_exact(3)
            .map(|c| (c[0].clone(), c[1].clone(), c[2].clone()))
            .collect();
        let restricted_apis = nereid_openai::restricted::Restrictions::parse(&restricted)
            .map_err(|e| anyhow::anyhow!("--openai-restricted-api: {e}"))?;
        let backend = match self.openai_backend.as_deref() {
            None => None,
            Some("vllm") => Some(BackendOverride::Vllm),
            Some("tensorrtllm") => Some(BackendOverride::TensorRtLlm),
            Some(other) => {
                anyhow::bail!("--openai-backend must be vllm or tensorrtllm, got '{other}'")
            }
        };
        Ok(OpenAiOptions {
            api_keys,
            strict: self.openai_strict,
            restricted_apis,
            max_request_size: match self.openai_max_request_size {
                Some(bytes) => BodyLimit {
                    bytes,
                    flag: "--openai-max-request-size",
                },
                None => BodyLimit {
                    bytes: http_max_input_size,
                    flag: "--http-max-input-size",
                },
            },
            default_max_tokens: self.default_max_tokens,
            tool_call_parser,
            max_tool_call_parse_bytes: self.max_tool_call_parse_bytes,
            tokenizer: self.tokenizer.clone(),
            backend,
        })
    }
}
