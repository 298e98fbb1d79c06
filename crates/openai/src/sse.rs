//! Server-sent events as OpenAI streams them: one `data: {json}` event per chunk, then
//! `data: [DONE]`. The body is the stream itself, polled as hyper writes: a client that
//! reads slowly holds the generation back, and one that disconnects drops the stream and
//! with it every choice's response stream, which cancels the requests in the model.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::Value;

use crate::generate::Finish;

/// A `text/event-stream` response of `chunks`, closed by `[DONE]`.
pub fn events(chunks: BoxStream<'static, Value>) -> Response {
    let body = chunks
        .map(|chunk| format!("data: {chunk}\n\n"))
        .chain(stream::once(async { "data: [DONE]\n\n".to_string() }))
        .map(Ok::<_, Infallible>);
    (
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream; charset=utf-8"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// The fields every body of one answer repeats (id, object, created, model), and the
/// choices' streams merged in the order their steps come.
pub struct Answer {
    id: String,
    created: u64,
    model: String,
}

impl Answer {
    /// An answer of `model` with a fresh id (`cmpl-`, `chatcmpl-`, ...).
    pub fn new(prefix: &str, model: &str) -> Self {
        Self {
            id: response_id(prefix),
            created: created(),
            model: model.to_string(),
        }
    }

    /// A whole answer of type `object`.
    pub fn whole(&self, object: &str, choices: Vec<Value>, usage: Value) -> Value {
        let mut body = self.chunk(object, Value::Array(choices), Some(usage));
        body["system_fingerprint"] = Value::Null;
        body
    }

    /// One chunk of a streamed answer of type `object` (`usage` only in the last).
    pub fn chunk(&self, object: &str, choices: Value, usage: Option<Value>) -> Value {
        let mut chunk = serde_json::json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        chunk
    }
}

/// The steps of every choice, tagged with the choice's index, as they come.
pub fn merged(
    runs: Vec<crate::generate::ChoiceRun>,
) -> stream::SelectAll<BoxStream<'static, (u32, crate::error::ApiResult<crate::generate::Step>)>> {
    stream::select_all(
        runs.into_iter()
            .enumerate()
            .map(|(i, run)| run.into_stream(i as u32)),
    )
}

/// A fresh response id with OpenAI's prefix (`cmpl-`, `chatcmpl-`, ...): the time and a
/// per-process counter, unique within the process.
pub fn response_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}{nanos:x}{n:04x}")
}

/// Seconds since the epoch, OpenAI's `created`.
pub fn created() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `usage` object summed over `finishes`; prompt tokens are counted once per prompt
/// (`prompts` of them, each `choices` times in `finishes`).
pub fn usage(finishes: &[Finish], choices: usize) -> Value {
    let prompt: u64 = finishes
        .iter()
        .step_by(choices.max(1))
        .map(|f| f.prompt_tokens)
        .sum();
    let completion: u64 = finishes.iter().map(|f| f.completion_tokens).sum();
    serde_json::json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish(prompt: u64, completion: u64) -> Finish {
        Finish {
            reason: "stop".into(),
            prompt_tokens: prompt,
            completion_tokens: completion,
        }
    }

    #[test]
    fn usage_counts_each_prompt_once() {
        // Two prompts, two choices each.
        let all = [finish(3, 1), finish(3, 2), finish(5, 4), finish(5, 8)];
        assert_eq!(
            usage(&all, 2),
            serde_json::json!({"prompt_tokens": 8, "completion_tokens": 15, "total_tokens": 23})
        );
    }

    #[test]
    fn ids_are_unique_and_prefixed() {
        let a = response_id("cmpl-");
        let b = response_id("cmpl-");
        assert!(a.starts_with("cmpl-") && a != b);
    }
}
