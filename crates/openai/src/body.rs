//! Reading a POST route's request: the API key, the size limit (checked on the declared
//! length first, then on the bytes as they come), and the JSON parse. Below the handlers
//! and the route table, which both use it.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use bytes::BytesMut;
use futures::StreamExt;

use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// A request body of at most the port's limit, after the API key check: refused on its
/// declared length before anything is read, else as soon as the bytes received pass the
/// limit (a chunked body), naming that count as Triton's frontend does.
pub(crate) async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Bytes> {
    state.authorize(headers)?;
    let limit = state.options.max_request_size;
    let too_large = |n| ApiError::too_large(n, limit);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(n) = declared.filter(|&n| n > limit.bytes) {
        return Err(too_large(n));
    }
    // A declared length is a hint, not a promise: reserve at most 64 KiB up front.
    let mut received = BytesMut::with_capacity(declared.unwrap_or(0).min(64 * 1024));
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid(format!("reading the request body: {e}")))?;
        let total = received.len() + chunk.len();
        if total > limit.bytes {
            drain_briefly(&mut chunks).await;
            return Err(too_large(total));
        }
        received.extend_from_slice(&chunk);
    }
    Ok(received.freeze())
}

/// How much more of a refused body is read and dropped, and for how long, before the 413.
/// A client still sending when the connection closes with its bytes unread gets a reset
/// and may never see the answer; a body a little over the limit (a last chunk and the
/// terminator) is over in this much, and a client sending far more cannot hold the
/// port's reads for longer.
const DRAIN_BYTES: usize = 1024 * 1024;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads and drops what is left of `chunks`, up to [`DRAIN_BYTES`] within [`DRAIN_TIME`].
async fn drain_briefly<S>(chunks: &mut S)
where
    S: futures::Stream<Item = Result<Bytes, axum::Error>> + Unpin,
{
    let drain = async {
        let mut dropped = 0;
        while let Some(Ok(chunk)) = chunks.next().await {
            dropped += chunk.len();
            if dropped > DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
}

/// A POST route's request: the API key checked, the body read under the limit and
/// parsed as `T` (unknown fields refused in strict mode; `unknown` finds them).
pub(crate) async fn decode<T: for<'de> serde::Deserialize<'de>>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    unknown: impl Fn(&T) -> &crate::schema::Unknown,
) -> ApiResult<T> {
    let body = read_body(state, headers, body).await?;
    crate::schema::parse(&body, state.options.strict, unknown)
}
