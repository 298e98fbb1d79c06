//! Errors as Triton's HTTP frontend answers them: a status from the error kind (one
//! mapping for the whole frontend) and a `{"error": "..."}` body.

use axum::body::{to_bytes, Body};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use nereid_core::{Error, ErrorKind};

/// An error response.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        Self(e)
    }
}

/// Triton's `HttpCodeFromError`.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorKind::InvalidArg
        | ErrorKind::AlreadyExists
        | ErrorKind::Cancelled
        | ErrorKind::Unknown => StatusCode::BAD_REQUEST,
    }
}

/// A `{"error": message}` response with `status`.
pub fn error_body(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Triton's answer to a known path with the wrong method.
pub async fn method_not_allowed() -> Response {
    error_body(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_body(status_of(self.0.kind()), self.0.message())
    }
}

/// Handlers' result type.
pub type ApiResult<T> = Result<T, ApiError>;

/// Largest plain-text error body [`json_rejections`] rewraps; axum's rejection texts are
/// one line.
const REJECTION_TEXT_LIMIT: usize = 4096;

/// Rewraps a plain-text error answer as `{"error": text}`, keeping its status. axum's
/// extractors answer their rejections (a body over `--http-max-input-size`, a path that
/// is not UTF-8) in plain text before any handler runs, and Triton's clients read the
/// JSON `error` of every failed request (found by the HTTP fuzz target). Successes, JSON
/// errors, event streams and errors without a body (the health endpoints' bare 400) pass unchanged.
pub async fn json_rejections(response: Response) -> Response {
    let status = response.status();
    // JSON errors, and generate streams whose error events Triton sends under the
    // error's status, are the answer as it should be.
    let answered = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            let v = v.as_bytes();
            v.starts_with(b"application/json") || v.starts_with(b"text/event-stream")
        });
    if answered || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = to_bytes(body, REJECTION_TEXT_LIMIT)
        .await
        .unwrap_or_default();
    if text.is_empty() {
        return Response::from_parts(parts, Body::empty());
    }
    error_body(status, String::from_utf8_lossy(&text).trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn rewrapped(response: Response) -> (StatusCode, Option<String>, String) {
        let response = json_rejections(response).await;
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().expect("ASCII").to_string());
        let body = to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a buffered body");
        (
            status,
            content_type,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    #[tokio::test]
    async fn plain_text_rejections_become_triton_errors() {
        let too_large = (
            StatusCode::PAYLOAD_TOO_LARGE,
            "Failed to buffer the request body: length limit exceeded",
        )
            .into_response();
        assert_eq!(
            rewrapped(too_large).await,
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                Some("application/json".into()),
                r#"{"error":"Failed to buffer the request body: length limit exceeded"}"#.into()
            )
        );
        let bare = StatusCode::BAD_REQUEST.into_response();
        assert_eq!(
            rewrapped(bare).await,
            (StatusCode::BAD_REQUEST, None, String::new())
        );
        let json = error_body(StatusCode::NOT_FOUND, "Not Found");
        assert_eq!(rewrapped(json).await.2, r#"{"error":"Not Found"}"#);
        let ok = (StatusCode::OK, "fine").into_response();
        assert_eq!(
            rewrapped(ok).await,
            (
                StatusCode::OK,
                Some("text/plain; charset=utf-8".into()),
                "fine".into()
            )
        );
    }
}
