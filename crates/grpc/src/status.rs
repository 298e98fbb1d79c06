//! Core errors as gRPC statuses: one mapping for the whole frontend, one-to-one as Triton's
//! `grpc_utils.cc` does it, with the message passed through unchanged (clients compare it)
//! unless it is too long for a trailer.

use nereid_core::{Error, ErrorKind};
use tonic::{Code, Status};

/// The gRPC code Triton answers with for an error of `kind`.
pub fn code_of(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::Internal => Code::Internal,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::InvalidArg => Code::InvalidArgument,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::Unsupported => Code::Unimplemented,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::Cancelled => Code::Cancelled,
        ErrorKind::Unknown => Code::Unknown,
    }
}

/// The longest status message sent. The message travels in the `grpc-message` trailer,
/// and a message that echoes a client's string (a 10,000-character request id) would
/// otherwise pass the client's header-size limit, which then reports RESOURCE_EXHAUSTED
/// instead of the error.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 4096;

/// The status a client receives for `error`.
pub fn to_status(error: Error) -> Status {
    Status::new(code_of(error.kind()), capped(error.message()))
}

/// `message`, cut at a character boundary to [`MAX_STATUS_MESSAGE_BYTES`] with a note of
/// how much was cut.
fn capped(message: &str) -> String {
    if message.len() <= MAX_STATUS_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_STATUS_MESSAGE_BYTES - 64;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}... ({} more bytes cut)",
        &message[..end],
        message.len() - end
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_one_to_one() {
        let cases = [
            (ErrorKind::Internal, Code::Internal),
            (ErrorKind::NotFound, Code::NotFound),
            (ErrorKind::InvalidArg, Code::InvalidArgument),
            (ErrorKind::Unavailable, Code::Unavailable),
            (ErrorKind::Unsupported, Code::Unimplemented),
            (ErrorKind::AlreadyExists, Code::AlreadyExists),
            (ErrorKind::Cancelled, Code::Cancelled),
            (ErrorKind::Unknown, Code::Unknown),
        ];
        for (kind, code) in cases {
            let status = to_status(Error::new(kind, "why"));
            assert_eq!(status.code(), code);
            assert_eq!(status.message(), "why");
        }
    }

    #[test]
    fn long_messages_are_cut_to_fit_a_trailer() {
        let id = "é".repeat(5000);
        let status = to_status(Error::invalid_arg(format!("[request id: {id}] bad")));
        assert!(status.message().len() <= MAX_STATUS_MESSAGE_BYTES);
        assert!(status.message().starts_with("[request id: éé"));
        assert!(
            status.message().ends_with(" more bytes cut)"),
            "{}",
            status.message()
        );
    }
}
