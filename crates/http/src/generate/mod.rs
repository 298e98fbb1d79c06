//! The generate extension: `POST .../generate` answers one JSON object per request and
//! `.../generate_stream` the same objects as server-sent events (`data: {...}\n\n`), one
//! per response: one event for most models, one per response of a decoupled model
//! (written as each comes). `generate` on a decoupled model needs exactly one response,
//! as in Triton, whose reply takes the status of the model's first message.
//!
//! Errors before inference (the model, the body, the request's validation) are answered
//! as a JSON error with its status, as on every endpoint; an inference error on a stream
//! is an `data: {"error": ...}` event under the error's status, as Triton sends it.
//!
//! A sampled request is traced as Triton's `GenerateRequestClass` does: `HTTP_RECV_*`,
//! the core's records, `INFER_RESPONSE_COMPLETE` for each message of the model (a final
//! flag alone included) and `HTTP_SEND_START` / `HTTP_SEND_END` for each event or reply
//! written (server `src/http_server.cc`). Triton 2.51 writes 0 for those two (its FIXME:
//! evhtp does not time chunked sends); the real times are written here.

mod request;
mod response;

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use nereid_core::request::{InferRequest, InferResponse};
use nereid_core::validate::validate_request;
use nereid_core::{Error, Server};
use std::sync::Arc;
use tokio_stream::wrappers::ReceiverStream;

use crate::admin::model_path;
use crate::error::{status_of, ApiResult};
use crate::trace::{self, stamp, Arrival};
use crate::AppState;

/// `Content-Type` of a generate stream.
const EVENT_STREAM: &str = "text/event-stream; charset=utf-8";
/// Server-sent events of one generate stream that may wait for the client.
const EVENTS_BUFFERED: usize = 16;

/// `POST /v2/models/{m}[/versions/{v}]/generate`.
pub async fn generate(
    state: State<AppState>,
    path: Path<Vec<(String, String)>>,
    headers: HeaderMap,
    arrival: Option<Extension<Arrival>>,
    body: Bytes,
) -> ApiResult<Response> {
    run(state, path, headers, arrival, body, false).await
}

/// `POST /v2/models/{m}[/versions/{v}]/generate_stream`.
pub async fn generate_stream(
    state: State<AppState>,
    path: Path<Vec<(String, String)>>,
    headers: HeaderMap,
    arrival: Option<Extension<Arrival>>,
    body: Bytes,
) -> ApiResult<Response> {
    run(state, path, headers, arrival, body, true).await
}

async fn run(
    State(state): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
    headers: HeaderMap,
    arrival: Option<Extension<Arrival>>,
    body: Bytes,
    stream: bool,
) -> ApiResult<Response> {
    let (model, version) = model_path(&path)?;
    let call = GenerateCall {
        server: &state.server,
        model: &model,
        version,
        max_input_size: state.options.max_input_size,
        stream,
    };
    answer(call, &headers, arrival, body).await
}

/// One generate call: the model (its latest version when `version` is `None`), the
/// input limit, and whether the answer is a stream of events.
pub(crate) struct GenerateCall<'a> {
    pub(crate) server: &'a Arc<Server>,
    pub(crate) model: &'a str,
    pub(crate) version: Option<i64>,
    pub(crate) max_input_size: usize,
    pub(crate) stream: bool,
}

/// Runs a generate `call` on `body`, for the HTTP routes and for SageMaker's
/// `/invocations` when it is set to generate.
pub(crate) async fn answer(
    call: GenerateCall<'_>,
    headers: &HeaderMap,
    arrival: Option<Extension<Arrival>>,
    body: Bytes,
) -> ApiResult<Response> {
    let GenerateCall {
        server,
        model,
        version,
        max_input_size,
        stream,
    } = call;
    let trace = trace::sample(server, model, headers, arrival);
    let spec = server.model_spec(model, version)?;
    // Triton reads generate bodies uncompressed only.
    let encoded = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return Err(Error::invalid_arg(
            "Unsupported content-encoding, only 'identity' is supported.",
        )
        .into());
    }
    let mut request = request::decode(&spec, version, &body, max_input_size)?;
    validate_request(&spec, &request)?;
    request.trace = trace.clone();
    if spec.decoupled {
        return decoupled(server, request, stream).await;
    }
    let answer = server.infer(request).await;
    stamp(trace.as_ref(), "INFER_RESPONSE_COMPLETE");
    let (status, json) = match answer {
        Ok(answer) => (StatusCode::OK, response::encode(&answer)?),
        Err(e) if stream => (status_of(e.kind()), error_json(&e)),
        Err(e) => return Err(e.into()),
    };
    let body = if stream {
        format!("data: {json}\n\n")
    } else {
        json
    };
    Ok(trace::send(trace, reply(status, stream, Body::from(body))))
}

/// The reply's head and `body`: JSON, or events for a stream.
fn reply(status: StatusCode, stream: bool, body: Body) -> Response {
    let content_type = if stream {
        EVENT_STREAM
    } else {
        "application/json"
    };
    (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

/// A decoupled model's answers. As in Triton, the reply starts when the first message
/// comes, with its status (OK for a response or a final flag alone, the error's for an
/// error), so a later error shows only in the body. A stream writes each response as an
/// event as it comes; `generate` needs exactly one response (an error counts as one)
/// and otherwise answers Triton's error under that same status.
async fn decoupled(server: &Server, request: InferRequest, stream: bool) -> ApiResult<Response> {
    let trace = request.trace.clone();
    let mut answers = server.submit_stream(request)?;
    let first = answers.recv().await;
    stamp(trace.as_ref(), "INFER_RESPONSE_COMPLETE");
    let status = match first.as_ref().and_then(|m| m.result.as_ref()) {
        Some(Err(e)) => status_of(e.kind()),
        _ => StatusCode::OK,
    };
    if !stream {
        let mut jsons = Vec::new();
        let mut next = first;
        while let Some(message) = next {
            jsons.extend(message.result.map(json_of));
            next = if message.last {
                None
            } else {
                let next = answers.recv().await;
                stamp(trace.as_ref(), "INFER_RESPONSE_COMPLETE");
                next
            };
        }
        let body = match (jsons.pop(), jsons.is_empty()) {
            (Some(json), true) => json,
            _ => error_json(&Error::internal(
                "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses",
            )),
        };
        return Ok(trace::send(trace, reply(status, false, Body::from(body))));
    }
    // Bounded: a client that reads slowly holds the model back instead of the events
    // piling up here.
    let (events, body) = tokio::sync::mpsc::channel::<Result<String, Infallible>>(EVENTS_BUFFERED);
    tokio::spawn(async move {
        let mut next = first;
        while let Some(message) = next {
            let event = message.result.map(|r| format!("data: {}\n\n", json_of(r)));
            // A client that went away stops the forwarding (dropping the answers). The body
            // is written as hyper polls it; the send is the hand-over to it.
            let mut gone = false;
            if let Some(event) = event {
                stamp(trace.as_ref(), "HTTP_SEND_START");
                gone = events.send(Ok(event)).await.is_err();
                stamp(trace.as_ref(), "HTTP_SEND_END");
            }
            if gone || message.last {
                return;
            }
            next = answers.recv().await;
            stamp(trace.as_ref(), "INFER_RESPONSE_COMPLETE");
        }
    });
    Ok(reply(
        status,
        true,
        Body::from_stream(ReceiverStream::new(body)),
    ))
}

/// The JSON of one response, or of its error.
fn json_of(result: nereid_core::Result<InferResponse>) -> String {
    result
        .and_then(|r| response::encode(&r))
        .unwrap_or_else(|e| error_json(&e))
}

fn error_json(e: &Error) -> String {
    serde_json::json!({ "error": e.message() }).to_string()
}
