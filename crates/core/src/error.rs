//! The core error: a Triton error kind plus a message. Frontends map the kind to an HTTP
//! status or a gRPC code in one place each; the message is what the client sees.

use std::fmt;

/// Error categories, the same as Triton's `TRITONSERVER_Error_Code`, so that every frontend
/// can answer with the status code a Triton client expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A server-side failure (HTTP 500, gRPC INTERNAL).
    Internal,
    /// Unknown model, version, region... (HTTP 404 for some endpoints, gRPC NOT_FOUND).
    NotFound,
    /// The client sent something invalid (HTTP 400, gRPC INVALID_ARGUMENT).
    InvalidArg,
    /// Temporarily cannot serve: queue full, model not ready, stopping (HTTP 503, gRPC UNAVAILABLE).
    Unavailable,
    /// Not implemented or not enabled (HTTP 501, gRPC UNIMPLEMENTED).
    Unsupported,
    /// Creating something that exists (HTTP 400, gRPC ALREADY_EXISTS).
    AlreadyExists,
    /// The request was cancelled (HTTP 400, gRPC CANCELLED).
    Cancelled,
    /// Anything else (HTTP 400, gRPC UNKNOWN).
    Unknown,
}

impl ErrorKind {
    /// Triton's name for the kind, as `TRITONSERVER_ErrorCodeString` spells it and
    /// tritonserver prints it in front of a start-up failure ("creating server: Internal
    /// - ..."), so processes that report a core error read as Triton's do.
    pub fn triton_name(self) -> &'static str {
        match self {
            Self::Unknown => "Unknown",
            Self::Internal => "Internal",
            Self::NotFound => "Not found",
            Self::InvalidArg => "Invalid argument",
            Self::Unavailable => "Unavailable",
            Self::Unsupported => "Unsupported",
            Self::AlreadyExists => "Already exists",
            Self::Cancelled => "Cancelled",
        }
    }
}

/// A failure with its kind and a message worded as Triton words it where clients match on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// Result with the core error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// Shorthand for [`ErrorKind::InvalidArg`].
    pub fn invalid_arg(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArg, message)
    }

    /// Shorthand for [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// Shorthand for [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// Shorthand for [`ErrorKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    /// Shorthand for [`ErrorKind::Unsupported`].
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// The category, for choosing a status code.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The client-visible message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `prefix` put in front of the message.
    pub fn prefixed(self, prefix: &str) -> Self {
        Self {
            kind: self.kind,
            message: format!("{prefix}{}", self.message),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
