//! Core errors as gRPC statuses: one mapping for the whole frontend, one-to-one as Triton's
//! `grpc_utils.cc` does it, with the message passed through unchanged (clients compare it).

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

/// The status a client receives for `error`.
pub fn to_status(error: Error) -> Status {
    Status::new(code_of(error.kind()), error.message())
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
}
