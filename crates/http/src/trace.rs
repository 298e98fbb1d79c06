//! The trace extension over HTTP: `GET/POST /v2/trace/setting` and
//! `/v2/models/{m}/trace/setting` (Triton's value shapes: `trace_level` an array, the rest
//! strings, `null` clears), and the HTTP timestamps of a sampled inference.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Frame;
pub(crate) use nereid_core::trace::stamp;
use nereid_core::trace::{RequestTrace, SettingValue, TraceSettingsView};
use nereid_core::{Error, Server};

use crate::error::ApiResult;
use crate::AppState;

/// When an inference request arrived, stamped before its body is read, only while
/// tracing is on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival(pub Instant);

/// Stamps [`Arrival`] on requests while any trace setting traces (one atomic check).
pub(crate) async fn stamp_arrival(
    State(server): State<Arc<Server>>,
    mut request: Request,
    next: Next,
) -> Response {
    if server.trace().is_active() {
        request.extensions_mut().insert(Arrival(Instant::now()));
    }
    next.run(request).await
}

/// `GET /v2/trace/setting`.
pub(crate) async fn get_global(State(state): State<AppState>) -> ApiResult<Response> {
    answer(&state, None, None)
}

/// `POST /v2/trace/setting`.
pub(crate) async fn post_global(State(state): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let update = parse_update(&body)?;
    answer(&state, None, Some(&update))
}

/// `GET /v2/models/{m}/trace/setting`.
pub(crate) async fn get_model(
    State(state): State<AppState>,
    Path(model): Path<String>,
) -> ApiResult<Response> {
    answer(&state, Some(&model), None)
}

/// `POST /v2/models/{m}/trace/setting`.
pub(crate) async fn post_model(
    State(state): State<AppState>,
    Path(model): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    // Triton checks the model before reading the body.
    state.server.trace_settings(Some(&model), None)?;
    let update = parse_update(&body)?;
    answer(&state, Some(&model), Some(&update))
}

fn answer(
    state: &AppState,
    model: Option<&str>,
    update: Option<&[(String, SettingValue)]>,
) -> ApiResult<Response> {
    let view = state.server.trace_settings(model, update)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], render(&view)).into_response())
}

/// The settings JSON in Triton's key order.
fn render(view: &TraceSettingsView) -> String {
    let fields: Vec<String> = view
        .entries()
        .into_iter()
        .map(|(name, mut values)| {
            let value = if name == "trace_level" {
                serde_json::Value::from(values)
            } else {
                serde_json::Value::from(values.pop().unwrap_or_default())
            };
            format!("\"{name}\":{value}")
        })
        .chain(view.mode_entries().map(|(name, value)| {
            // A setting given twice appears twice, as in Triton's answer.
            format!(
                "{}:{}",
                serde_json::Value::from(name),
                serde_json::Value::from(value)
            )
        }))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// The body of a settings update: a JSON object (empty body: no change) whose values are
/// `null`, strings or arrays of strings.
fn parse_update(body: &[u8]) -> Result<Vec<(String, SettingValue)>, Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let json: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| Error::invalid_arg(format!("failed to parse the request JSON buffer: {e}")))?;
    let serde_json::Value::Object(object) = json else {
        return Err(Error::invalid_arg(
            "trace settings must be a JSON object of setting names to values",
        ));
    };
    object
        .into_iter()
        .map(|(name, value)| {
            let value = match value {
                serde_json::Value::Null => SettingValue::Clear,
                serde_json::Value::String(s) => SettingValue::Scalar(s),
                serde_json::Value::Array(items) => SettingValue::List(
                    items
                        .into_iter()
                        .map(|item| match item {
                            serde_json::Value::String(s) => Ok(s),
                            other => Err(wrong_type(&name, &other)),
                        })
                        .collect::<Result<_, _>>()?,
                ),
                other => return Err(wrong_type(&name, &other)),
            };
            Ok((name, value))
        })
        .collect()
}

fn wrong_type(name: &str, value: &serde_json::Value) -> Error {
    Error::invalid_arg(format!(
        "Unable to parse '{name}': expected a string (an array of strings for \
         'trace_level') or null, got {value}"
    ))
}

/// Samples a request to `model` that was stamped on arrival (only requests stamped while
/// tracing was on are considered), continuing the client's trace context from `headers`
/// in the opentelemetry mode, and records its `HTTP_RECV_*`.
pub(crate) fn sample(
    server: &Server,
    model: &str,
    headers: &axum::http::HeaderMap,
    arrival: Option<axum::Extension<Arrival>>,
) -> Option<RequestTrace> {
    let axum::Extension(at) = arrival?;
    let header = |name: &str| Some(headers.get(name)?.to_str().ok()?.to_string());
    let trace = server.trace().sample_propagated(model, &header)?;
    received(&trace, at.0);
    Some(trace)
}

/// A sampled HTTP inference's frontend timestamps.
fn received(trace: &RequestTrace, arrival: Instant) {
    trace.timestamp("HTTP_RECV_START", arrival);
    trace.timestamp("HTTP_RECV_END", Instant::now());
}

/// The response of a request, traced if sampled: `HTTP_SEND_START` now, `HTTP_SEND_END`
/// once the server has written the body (when hyper drops it), which also ends the trace.
pub(crate) fn send(trace: Option<RequestTrace>, response: Response) -> Response {
    let Some(trace) = trace else {
        return response;
    };
    trace.timestamp("HTTP_SEND_START", Instant::now());
    response.map(|inner| {
        Body::new(TracedBody {
            inner,
            trace: Some(trace),
        })
    })
}

/// A response body that records `HTTP_SEND_END` when it is dropped.
struct TracedBody {
    inner: Body,
    trace: Option<RequestTrace>,
}

impl http_body::Body for TracedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TracedBody {
    fn drop(&mut self) {
        if let Some(trace) = self.trace.take() {
            trace.timestamp("HTTP_SEND_END", Instant::now());
        }
    }
}
