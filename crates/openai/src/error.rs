//! Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, with the
//! status OpenAI's clients expect. Every failure of the port is answered through here,
//! so a client that parses OpenAI errors never sees another shape (Triton's frontend
//! answers FastAPI's `{"detail": ...}` for some).

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
        }
    }

    /// A 400 about one field.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.to_string()),
            ..Self::invalid(message)
        }
    }

    /// The 404 for a model this port does not serve.
    pub fn unknown_model(name: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{name}` does not exist."),
            kind: "invalid_request_error",
            param: Some("model".to_string()),
            code: Some("model_not_found"),
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
        }
    }

    /// The 413 for a body over the port's limit: `actual` is the declared length, or the
    /// bytes received when the running count crossed the limit. Triton's frontend's code
    /// and wording, with this port's flag.
    pub fn too_large(actual: usize, limit: usize) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!(
                "Request size of {actual} bytes exceeds the maximum allowed input size of \
                 {limit} bytes. Use --openai-max-request-size to increase the limit."
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("content_too_large"),
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
        }
    }

    /// The error's JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
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
    fn errors_have_openais_shape_and_status() {
        let e = ApiError::unknown_model("m");
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {
                "message": "The model `m` does not exist.",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found"
            }})
        );
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
