//! The generate extension: `POST .../generate` answers one JSON object per request and
//! `.../generate_stream` the same objects as server-sent events (`data: {...}\n\n`), one
//! per response: one event for most models, one per response of a decoupled model
//! (written as each comes). `generate` on a decoupled model needs exactly one response,
//! as in Triton.
//!
//! Errors before inference (the model, the body, the request's validation) are answered
//! as a JSON error with its status, as on every endpoint; an inference error on a stream
//! is an `data: {"error": ...}` event under the error's status, as Triton sends it.

mod request;
mod response;

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use nereid_core::request::{InferRequest, InferResponse};
use nereid_core::validate::validate_request;
use nereid_core::Error;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::admin::model_path;
use crate::error::{status_of, ApiResult};
use crate::AppState;

/// `Content-Type` of a generate stream.
const EVENT_STREAM: &str = "text/event-stream; charset=utf-8";

/// `POST /v2/models/{m}[/versions/{v}]/generate`.
pub async fn generate(
    state: State<AppState>,
    path: Path<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    run(state, path, headers, body, false).await
}

/// `POST /v2/models/{m}[/versions/{v}]/generate_stream`.
pub async fn generate_stream(
    state: State<AppState>,
    path: Path<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    run(state, path, headers, body, true).await
}

async fn run(
    State(state): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
    stream: bool,
) -> ApiResult<Response> {
    let (model, version) = model_path(&path)?;
    let spec = state.server.model_spec(&model, version)?;
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
    let request = request::decode(&spec, version, &body, state.options.max_input_size)?;
    validate_request(&spec, &request)?;
    if spec.decoupled && stream {
        return stream_decoupled(&state, request);
    }
    let answer = if spec.decoupled {
        only_answer(&state, request).await
    } else {
        state.server.infer(request).await
    };
    let (status, json) = match answer {
        Ok(answer) => (StatusCode::OK, response::encode(&answer)?),
        Err(e) if stream => (status_of(e.kind()), error_json(&e)),
        Err(e) => return Err(e.into()),
    };
    let (content_type, body) = if stream {
        (EVENT_STREAM, format!("data: {json}\n\n"))
    } else {
        ("application/json", json)
    };
    Ok((
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response())
}

/// A decoupled model's answers as events, each written as the model sends it; an
/// error is an error event; a final flag alone ends the stream without one.
fn stream_decoupled(state: &AppState, request: InferRequest) -> ApiResult<Response> {
    let mut answers = state.server.submit_stream(request)?;
    let (events, body) = tokio::sync::mpsc::unbounded_channel::<Result<String, Infallible>>();
    tokio::spawn(async move {
        while let Some(answer) = answers.recv().await {
            let json = match answer.result {
                Some(Ok(response)) => {
                    response::encode(&response).unwrap_or_else(|e| error_json(&e))
                }
                Some(Err(e)) => error_json(&e),
                None => String::new(),
            };
            // A client that went away stops the forwarding (dropping the answers).
            if !json.is_empty() && events.send(Ok(format!("data: {json}\n\n"))).is_err() {
                return;
            }
            if answer.last {
                return;
            }
        }
    });
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM))],
        Body::from_stream(UnboundedReceiverStream::new(body)),
    )
        .into_response())
}

/// The one response of a decoupled model's request, with Triton's error when it sends
/// any other number.
async fn only_answer(
    state: &AppState,
    request: InferRequest,
) -> nereid_core::Result<InferResponse> {
    let mut answers = state.server.submit_stream(request)?;
    let mut results = Vec::new();
    while let Some(answer) = answers.recv().await {
        results.extend(answer.result);
        if answer.last {
            break;
        }
    }
    match (results.pop(), results.is_empty()) {
        (Some(result), true) => result,
        _ => Err(Error::internal(
            "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses",
        )),
    }
}

fn error_json(e: &Error) -> String {
    serde_json::json!({ "error": e.message() }).to_string()
}
