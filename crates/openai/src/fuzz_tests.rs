//! Fuzzing of the OpenAI routes through the whole route table (`router()`, driven with
//! `oneshot`, no socket) against a server whose LLM echoes its prompt (a test backend in
//! vLLM's tensor convention, with a chat template): request decoding, the checks, the
//! choices, stop strings, streaming and the error encoder.
//!
//! Each iteration builds a valid request at random. Sent as it is, it must succeed (200,
//! a JSON body or server-sent events ending in `[DONE]`). Mutated (JSON bytes, the path),
//! the answer must be a success or an error in OpenAI's shape — a 4xx whose body is
//! `{"error": {"message", "type", "param", "code"}}` — never a 5xx or a broken body.
//! `NEREID_FUZZ_ITERATIONS` sets the iteration count (see docs/src/development.md, "Fuzzing").

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use nereid_core::testing::fuzz::{self, Rng, TrackingAllocator};
use nereid_core::testing::{self, TestBackend};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::{router, OpenAiOptions};

#[global_allocator]
static ALLOCATOR: TrackingAllocator = TrackingAllocator;

/// Iterations in the test command (a few seconds in release mode).
const SHORT_RUN: u64 = 5_000;

/// The body limit of the fuzzed router; mutations sometimes grow a body past it.
const MAX_BODY: usize = 16 << 10;

/// An LLM in vLLM's convention whose answer is its prompt.
const LLM: &str = r#"backend: "identity" max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
        { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
        { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]"#;

/// A chat template that lists the roles and contents.
const TOKENIZER_CONFIG: &str = r#"{"chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"}"#;

/// The router over the echo LLM, with the runtime that serves it.
struct Harness {
    runtime: tokio::runtime::Runtime,
    router: Router,
    _repo: tempfile::TempDir,
}

impl Harness {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let repo = tempfile::tempdir().expect("temp dir");
        testing::write_model(repo.path(), "llm", LLM, &[1]);
        std::fs::write(
            repo.path().join("llm/tokenizer_config.json"),
            TOKENIZER_CONFIG,
        )
        .expect("written");
        let backend = TestBackend::echo(&[("text_input", "text_output")]);
        let server = runtime.block_on(testing::server(repo.path(), &backend));
        let options = OpenAiOptions {
            max_request_size: crate::BodyLimit {
                bytes: MAX_BODY,
                flag: "--openai-max-request-size",
            },
            tool_call_parser: Some(nereid_chat::tools::ToolCallParser::Hermes),
            ..OpenAiOptions::default()
        };
        Self {
            runtime,
            router: router(server, options, Arc::new(String::new)),
            _repo: repo,
        }
    }

    /// Sends `case` and returns the status and the whole answer.
    fn send(&self, case: &Case) -> (StatusCode, bytes::Bytes) {
        let request = Request::post(&case.path)
            .header("content-type", "application/json")
            .body(Body::from(case.body.clone()))
            .expect("a valid request head");
        self.runtime.block_on(async {
            let response = self
                .router
                .clone()
                .oneshot(request)
                .await
                .expect("the router is infallible");
            let status = response.status();
            let body = to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("a whole body");
            (status, body)
        })
    }
}

/// One request.
#[derive(Debug, Clone)]
struct Case {
    path: String,
    body: Vec<u8>,
}

/// A random valid request to one of the generation routes.
fn valid(rng: &mut Rng) -> Case {
    let words = [
        "hello",
        "stop",
        "é",
        "🙂",
        "\\n",
        "tool",
        "<tool_call>",
        "{",
        "}",
        " ",
    ];
    let mut text = String::new();
    for _ in 0..rng.below(12) {
        text.push_str(rng.pick::<&str>(&words[..]));
    }
    let mut body = serde_json::Map::new();
    body.insert("model".into(), json!("llm"));
    if rng.one_in(2) {
        body.insert("max_tokens".into(), json!(1 + rng.below(64)));
    }
    if rng.one_in(3) {
        body.insert("stream".into(), json!(true));
        if rng.one_in(2) {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
    }
    if rng.one_in(3) {
        body.insert("n".into(), json!(1 + rng.below(3)));
    }
    if rng.one_in(3) {
        body.insert("stop".into(), json!([rng.pick(&words[..]), "é"]));
    }
    if rng.one_in(4) {
        body.insert("temperature".into(), json!(rng.below(200) as f64 / 100.0));
    }
    let path = if rng.one_in(2) {
        let prompt = match rng.below(3) {
            0 => json!(text),
            1 => json!([text, "second"]),
            _ => json!(text.clone() + "x"),
        };
        body.insert("prompt".into(), prompt);
        if rng.one_in(4) {
            body.insert("echo".into(), json!(true));
        }
        "/v1/completions"
    } else {
        let content = if rng.one_in(2) {
            json!(text)
        } else {
            json!([{"type": "text", "text": text}, {"type": "text", "text": "more"}])
        };
        body.insert(
            "messages".into(),
            json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": content}]),
        );
        if rng.one_in(4) {
            body.insert(
                "tools".into(),
                json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]),
            );
        }
        "/v1/chat/completions"
    };
    Case {
        path: path.into(),
        body: Value::Object(body).to_string().into_bytes(),
    }
}

/// A successful answer: a JSON object, or events ending with `[DONE]`, each a JSON object.
fn assert_success(body: &[u8], case: &Case) {
    let text = std::str::from_utf8(body).expect("UTF-8");
    if let Some(events) = text.strip_prefix("data: ") {
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        for event in format!("data: {events}")
            .split("\n\n")
            .filter(|e| !e.is_empty())
        {
            let data = event.strip_prefix("data: ").expect("an event");
            if data != "[DONE]" {
                let chunk: Value = serde_json::from_str(data).expect("a JSON chunk");
                assert!(chunk.is_object(), "{case:?}: {data}");
            }
        }
    } else {
        let answer: Value = serde_json::from_str(text).expect("a JSON answer");
        assert!(answer["choices"].is_array(), "{case:?}: {text}");
    }
}

/// An error in OpenAI's shape.
fn assert_openai_error(body: &[u8], case: &Case) {
    let answer: Value = serde_json::from_slice(body).expect("a JSON error");
    let error = answer["error"].as_object().expect("an error object");
    let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "param", "type"], "{case:?}");
}

#[test]
fn openai_routes_answer_every_request_in_openais_shape() {
    let harness = Harness::start();
    fuzz::run(
        "openai_routes",
        SHORT_RUN,
        |rng| {
            let mut case = valid(rng);
            let mutated = rng.one_in(4) || !rng.one_in(3);
            if mutated {
                if rng.one_in(8) {
                    case.path = rng
                        .pick(&["/v1/embeddings", "/v1/models/x", "/v2/x"])
                        .to_string();
                }
                let other = valid(rng).body;
                let tokens = [
                    "\"n\":",
                    "null",
                    "[]",
                    "{}",
                    "\"model\":\"x\"",
                    "-1",
                    "1e999",
                    "\"stream\":true",
                ];
                fuzz::mutate(
                    rng,
                    &mut case.body,
                    &[other.as_slice()],
                    &tokens,
                    MAX_BODY + 64,
                );
            }
            (case, mutated)
        },
        |(case, mutated), _| {
            let (status, body) = harness.send(case);
            if !mutated {
                assert_eq!(
                    status,
                    StatusCode::OK,
                    "{case:?}: {}",
                    String::from_utf8_lossy(&body)
                );
                assert_success(&body, case);
            } else if status == StatusCode::OK {
                assert_success(&body, case);
            } else {
                assert!(
                    status.is_client_error(),
                    "{status} for {case:?}: {}",
                    String::from_utf8_lossy(&body)
                );
                if status != StatusCode::METHOD_NOT_ALLOWED {
                    assert_openai_error(&body, case);
                }
            }
        },
    );
}
