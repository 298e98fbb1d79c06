//! The one error type of this crate: a kind the frontend maps to an HTTP status, and a message
//! for the client.

use std::fmt;

/// What went wrong, so that the OpenAI frontend can choose a status without reading messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatErrorKind {
    /// The model's chat template does not compile (a server-side configuration problem).
    BadTemplate,
    /// Rendering failed: the template called `raise_exception`, or the request's messages do
    /// not fit what the template expects (a client problem, answered 400).
    TemplateError,
    /// `tokenizer.json` cannot be read as a tokenizer, or encoding/decoding failed.
    BadTokenizer,
    /// A file of the model's folder cannot be read, or is not the JSON it should be.
    Io,
    /// A template ran past its fuel or recursion limit (a hostile or runaway template).
    Limit,
}

impl ChatErrorKind {
    /// A short name for logs and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatErrorKind::BadTemplate => "bad chat template",
            ChatErrorKind::TemplateError => "chat template error",
            ChatErrorKind::BadTokenizer => "bad tokenizer",
            ChatErrorKind::Io => "model text files",
            ChatErrorKind::Limit => "chat template limit",
        }
    }
}

/// An error of this crate: a kind and a message that names what failed (a path, the
/// template's own words from `raise_exception`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", kind.as_str())]
pub struct ChatError {
    kind: ChatErrorKind,
    message: String,
}

impl ChatError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ChatErrorKind, message: impl Into<String>) -> Self {
        ChatError {
            kind,
            message: message.into(),
        }
    }

    /// The kind, for the frontend's status mapping.
    pub fn kind(&self) -> ChatErrorKind {
        self.kind
    }

    /// The message alone, without the kind's name (what a client is shown).
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Shorthand used inside the crate: an [`ChatErrorKind::Io`] error naming `path`.
pub(crate) fn io_error(path: &std::path::Path, err: impl fmt::Display) -> ChatError {
    ChatError::new(ChatErrorKind::Io, format!("{}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_has_kind_and_message() {
        let e = ChatError::new(ChatErrorKind::TemplateError, "roles must alternate");
        assert_eq!(e.kind(), ChatErrorKind::TemplateError);
        assert_eq!(e.message(), "roles must alternate");
        assert_eq!(e.to_string(), "chat template error: roles must alternate");
    }
}
