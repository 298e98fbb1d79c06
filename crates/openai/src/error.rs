//! Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the
//! status Triton's frontend answers. Every failure of the port is answered through here.
//! Triton's frontend answers FastAPI's `{"detail": "<message>"}` for every error but a
//! body over the size limit, so the body carries `detail` too: a client written for
//! Triton's frontend and one written for OpenAI's both find the message.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use nereid_core::ErrorKind;

/// One error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `invalid_api_key`, ...).
    pub code: Option<&'static str>,
    /// Whether the body repeats the message as Triton's frontend's `detail`.
    pub detail: bool,
}

/// Result of a handler step.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// A 400 about the request as a whole.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: None,
            detail: true,
        }
    }

    /// A 400 about one field.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.to_string()),
            ..Self::invalid(message)
        }
    }

    /// The 400 for an inference request naming a model this port does not serve, in
    /// Triton's frontend's words and status (OpenAI's own API answers 404).
    pub fn unknown_model(name: &str) -> Self {
        Self {
            message: format!("Unknown model: {name}"),
            param: Some("model".to_string()),
            code: Some("model_not_found"),
            ..Self::invalid("")
        }
    }

    /// The 404 of `GET /v1/models/{name}` for a model that is not ready.
    pub fn model_not_found(name: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            ..Self::unknown_model(name)
        }
    }

    /// The 401 for a missing or wrong API key.
    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: "Incorrect API key provided.".to_string(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
            detail: true,
        }
    }

    /// The 413 for a body over the port's limit: `actual` is the declared length, or the
    /// bytes received when the running count crossed the limit. Triton's frontend's code,
    /// wording and shape (no `detail`), naming the flag that set the limit.
    pub fn too_large(actual: usize, limit: crate::BodyLimit) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "Request size of {actual} bytes exceeds the maximum allowed input size of \
                 {} bytes. Use {} to increase the limit.",
                limit.bytes, limit.flag
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("content_too_large"),
            detail: false,
        }
    }

    /// A 500 for a model answer this port cannot read.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            detail: true,
        }
    }

    /// The error's JSON body.
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        });
        if self.detail {
            body["detail"] = self.message.clone().into();
        }
        body
    }
}

impl From<nereid_core::Error> for ApiError {
    /// The core's kinds as OpenAI's statuses: a full queue is 429 (OpenAI's "overloaded,
    /// retry"), a model that is not ready 503, the client's mistakes 400.
    fn from(e: nereid_core::Error) -> Self {
        let (status, kind, code) = match e.kind() {
            ErrorKind::InvalidArg | ErrorKind::AlreadyExists | ErrorKind::Unknown => {
                (StatusCode::BAD_REQUEST, "invalid_request_error", None)
            }
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "invalid_request_error", None),
            ErrorKind::Unavailable if e.message().contains("maximum queue size") => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                Some("rate_limit_exceeded"),
            ),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "server_error", None),
            ErrorKind::Unsupported => (StatusCode::BAD_REQUEST, "invalid_request_error", None),
            ErrorKind::Cancelled => (StatusCode::BAD_REQUEST, "invalid_request_error", None),
            ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "server_error", None),
        };
        Self {
            status,
            message: e.message().to_string(),
            kind,
            param: None,
            code,
            detail: true,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            self.body().to_string(),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_openais_shape_and_tritons_status_and_detail() {
        let e = ApiError::unknown_model("m");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            e.body(),
            serde_json::json!({
                "error": {
                    "message": "Unknown model: m",
                    "type": "invalid_request_error",
                    "param": "model",
                    "code": "model_not_found"
                },
                "detail": "Unknown model: m"
            })
        );
        assert_eq!(ApiError::model_not_found("m").status, StatusCode::NOT_FOUND);
        // Triton's frontend answers a body over the limit in OpenAI's shape alone.
        let limit = crate::BodyLimit::default();
        let large = ApiError::too_large(limit.bytes + 1, limit);
        assert_eq!(large.body().as_object().map(|b| b.len()), Some(1));
        assert!(large
            .message
            .ends_with("Use --http-max-input-size to increase the limit."));
        let full = ApiError::from(nereid_core::Error::unavailable(
            "Exceeds maximum queue size",
        ));
        assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS);
        let bad = ApiError::from(nereid_core::Error::invalid_arg("bad"));
        assert_eq!(
            (bad.status, bad.kind),
            (StatusCode::BAD_REQUEST, "invalid_request_error")
        );
    }
}
