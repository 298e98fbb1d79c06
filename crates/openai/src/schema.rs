//! The request bodies of the OpenAI routes, as typed serde structs. Fields OpenAI defines
//! and Nereid does not know stay in `unknown`: accepted as vLLM and OpenAI accept them
//! (Triton's frontend answers 422), refused with `--openai-strict`, and handed to a
//! vLLM-convention model inside `sampling_parameters` (vLLM's own extra sampling fields
//! such as `ignore_eos` or `repetition_penalty` reach it that way).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// Fields a request carried that this frontend does not interpret.
pub type Unknown = BTreeMap<String, Value>;

/// `prompt` of `/v1/completions`: a text, texts, token ids or lists of token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One prompt.
    Text(String),
    /// Several prompts, one choice list each.
    Texts(Vec<String>),
    /// One prompt as token ids.
    Tokens(Vec<u32>),
    /// Several prompts as token ids.
    TokenLists(Vec<Vec<u32>>),
}

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Up to four (OpenAI's limit; Nereid takes any number).
    Many(Vec<String>),
}

impl Stop {
    /// The stop strings, empty ones dropped.
    pub fn strings(&self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s.clone()],
            Stop::Many(v) => v.clone(),
        }
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect()
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// A last chunk with the request's `usage` before `[DONE]`.
    #[serde(default)]
    pub include_usage: bool,
}

/// The sampling fields both generation routes share.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sampling {
    /// Output tokens at most.
    pub max_tokens: Option<u32>,
    /// 0 to 2.
    pub temperature: Option<f64>,
    /// 0 to 1.
    pub top_p: Option<f64>,
    /// -1 (off) or at least 1 (vLLM's extension).
    pub top_k: Option<i64>,
    /// 0 to 1 (vLLM's extension).
    pub min_p: Option<f64>,
    /// Same seed and prompt, same text (where the model honours it).
    pub seed: Option<u64>,
    /// Strings that end the text (not included in it).
    pub stop: Option<Stop>,
    /// -2 to 2.
    pub presence_penalty: Option<f64>,
    /// -2 to 2.
    pub frequency_penalty: Option<f64>,
    /// Choices per prompt, at least 1.
    pub n: Option<u32>,
    /// Server-sent events instead of one answer.
    #[serde(default)]
    pub stream: bool,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// The caller's end-user id: logged, nothing else.
    pub user: Option<String>,
}

/// The body of `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// Model name.
    pub model: String,
    /// The prompt(s).
    pub prompt: Prompt,
    /// Shared sampling fields.
    #[serde(flatten)]
    pub sampling: Sampling,
    /// Prompt repeated before the completion.
    #[serde(default)]
    pub echo: bool,
    /// Top log probabilities per token (0 to 5), where the model reports them.
    pub logprobs: Option<u32>,
    /// Text after the completion: not supported (400).
    pub suffix: Option<String>,
    /// Everything else.
    #[serde(flatten)]
    pub unknown: Unknown,
}

/// The body of `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// Model name.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Value>,
    /// Shared sampling fields.
    #[serde(flatten)]
    pub sampling: Sampling,
    /// OpenAI's newer name for `max_tokens` (wins when both are set).
    pub max_completion_tokens: Option<u32>,
    /// Functions the model may call.
    pub tools: Option<Vec<Value>>,
    /// `none`, `auto`, `required` or `{"type": "function", "function": {"name": ...}}`.
    pub tool_choice: Option<Value>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}`.
    pub response_format: Option<Value>,
    /// Log probabilities of the chosen tokens, where the model reports them.
    #[serde(default)]
    pub logprobs: bool,
    /// Alternatives per token (0 to 20) with `logprobs`.
    pub top_logprobs: Option<u32>,
    /// Extra variables for the chat template (vLLM's extension).
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// Whether the template ends with the assistant's turn opened (vLLM's extension;
    /// default true).
    pub add_generation_prompt: Option<bool>,
    /// Everything else.
    #[serde(flatten)]
    pub unknown: Unknown,
}

/// `input` of `/v1/embeddings`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// One text.
    Text(String),
    /// Several texts.
    Texts(Vec<String>),
    /// One text as token ids.
    Tokens(Vec<u32>),
    /// Several texts as token ids.
    TokenLists(Vec<Vec<u32>>),
}

/// The body of `POST /v1/embeddings`.
#[derive(Debug, Clone, Deserialize)]
pub struct EmbeddingRequest {
    /// Model name.
    pub model: String,
    /// The text(s).
    pub input: EmbeddingInput,
    /// `float` (default) or `base64`.
    pub encoding_format: Option<String>,
    /// Leading dimensions to keep, where the model allows.
    pub dimensions: Option<u32>,
    /// The caller's end-user id.
    pub user: Option<String>,
    /// Everything else.
    #[serde(flatten)]
    pub unknown: Unknown,
}

/// Reads a body as `T`: malformed JSON and wrong field types are 400s naming the problem
/// as serde sees it; with `strict`, a field this frontend does not know is a 400 too.
pub fn parse<T: for<'de> Deserialize<'de>>(
    body: &[u8],
    strict: bool,
    unknown: impl Fn(&T) -> &Unknown,
) -> ApiResult<T> {
    let parsed: T = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("Invalid request body: {e}")))?;
    if strict {
        if let Some(name) = unknown(&parsed).keys().next() {
            return Err(ApiError::invalid_param(
                name,
                format!("Unrecognized request argument supplied: {name}"),
            ));
        }
    }
    Ok(parsed)
}

impl Sampling {
    /// OpenAI's ranges, checked before the model sees anything; `n` at most 128.
    pub fn check(&self) -> ApiResult<()> {
        let range = |name: &str, value: Option<f64>, low: f64, high: f64| match value {
            Some(v) if !(low..=high).contains(&v) => Err(ApiError::invalid_param(
                name,
                format!("'{name}' must be between {low} and {high}, got {v}"),
            )),
            _ => Ok(()),
        };
        range("temperature", self.temperature, 0.0, 2.0)?;
        range("top_p", self.top_p, 0.0, 1.0)?;
        range("min_p", self.min_p, 0.0, 1.0)?;
        range("presence_penalty", self.presence_penalty, -2.0, 2.0)?;
        range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?;
        if let Some(k) = self.top_k {
            if k == 0 || k < -1 {
                return Err(ApiError::invalid_param(
                    "top_k",
                    format!("'top_k' must be -1 (off) or at least 1, got {k}"),
                ));
            }
        }
        match self.n {
            Some(n) if n == 0 || n > 128 => Err(ApiError::invalid_param(
                "n",
                format!("'n' must be between 1 and 128, got {n}"),
            )),
            _ => Ok(()),
        }?;
        if self.max_tokens == Some(0) {
            return Err(ApiError::invalid_param(
                "max_tokens",
                "'max_tokens' must be at least 1",
            ));
        }
        Ok(())
    }

    /// Choices per prompt.
    pub fn choices(&self) -> u32 {
        self.n.unwrap_or(1)
    }

    /// Whether a streamed answer ends with a usage chunk.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(body: &str, strict: bool) -> ApiResult<CompletionRequest> {
        parse(body.as_bytes(), strict, |r: &CompletionRequest| &r.unknown)
    }

    #[test]
    fn prompts_of_every_shape_parse() {
        for (body, shape) in [
            (r#"{"model":"m","prompt":"hi"}"#, "text"),
            (r#"{"model":"m","prompt":["a","b"]}"#, "texts"),
            (r#"{"model":"m","prompt":[1,2,3]}"#, "tokens"),
            (r#"{"model":"m","prompt":[[1],[2,3]]}"#, "lists"),
        ] {
            let parsed = completion(body, false).expect(shape).prompt;
            let got = match parsed {
                Prompt::Text(_) => "text",
                Prompt::Texts(_) => "texts",
                Prompt::Tokens(_) => "tokens",
                Prompt::TokenLists(_) => "lists",
            };
            assert_eq!(got, shape);
        }
    }

    #[test]
    fn unknown_fields_pass_unless_strict() {
        let body = r#"{"model":"m","prompt":"hi","ignore_eos":true}"#;
        let r = completion(body, false).expect("accepted");
        assert_eq!(r.unknown.get("ignore_eos"), Some(&Value::Bool(true)));
        let e = completion(body, true).expect_err("strict");
        assert_eq!(e.param.as_deref(), Some("ignore_eos"));
        assert_eq!(
            e.message,
            "Unrecognized request argument supplied: ignore_eos"
        );
    }

    #[test]
    fn bad_json_and_ranges_are_400s() {
        let e = completion("{", false).expect_err("bad json");
        assert!(
            e.message.starts_with("Invalid request body: "),
            "{}",
            e.message
        );
        let r = completion(r#"{"model":"m","prompt":"x","temperature":3}"#, false).expect("parses");
        let e = r.sampling.check().expect_err("out of range");
        assert_eq!(e.param.as_deref(), Some("temperature"));
        let r = completion(r#"{"model":"m","prompt":"x","n":0}"#, false).expect("parses");
        assert_eq!(
            r.sampling.check().expect_err("n").message,
            "'n' must be between 1 and 128, got 0"
        );
    }
}
