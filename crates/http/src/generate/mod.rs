//! The generate extension: `POST .../generate` answers one JSON object per request and
//! `.../generate_stream` the same objects as server-sent events (`data: {...}\n\n`), one
//! per response. Models here answer once per request, so a stream holds one event.
//!
//! Errors before inference (the model, the body, the request's validation) are answered
//! as a JSON error with its status, as on every endpoint; an inference error on a stream
//! is an `data: {"error": ...}` event under the error's status, as Triton sends it.

mod request;
mod response;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use nereid_core::validate::validate_request;
use nereid_core::Error;

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
    let (status, json) = match state.server.infer(request).await {
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

fn error_json(e: &Error) -> String {
    serde_json::json!({ "error": e.message() }).to_string()
}
