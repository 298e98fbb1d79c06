//! Errors as Triton's HTTP frontend answers them: a status from the error kind (one
//! mapping for the whole frontend) and a `{"error": "..."}` body.

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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_body(status_of(self.0.kind()), self.0.message())
    }
}

/// Handlers' result type.
pub type ApiResult<T> = Result<T, ApiError>;
