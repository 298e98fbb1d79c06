//! The crate's error: the reason, and which of the core's kinds it is, so the registry
//! can answer Triton's status without parsing text.

/// What went wrong, in the core's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The client's region description is wrong (a key, a size, a handle).
    InvalidArg,
    /// The system refused something the server asked for.
    Internal,
    /// A resource is exhausted for now (the mapping table is full).
    Unavailable,
}

/// A failed shared-memory operation: its kind and the reason, without the region's name
/// (the caller adds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// This crate's results.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`ErrorKind::InvalidArg`] error.
    pub fn invalid_arg(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArg, message)
    }

    /// An [`ErrorKind::Internal`] error.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// An [`ErrorKind::Unavailable`] error.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The kind, for the caller's status.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The reason.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
