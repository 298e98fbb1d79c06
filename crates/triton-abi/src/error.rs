//! `TRITONSERVER_Error`: Triton's error object. Null means success everywhere in the ABI;
//! a non-null error belongs to whoever receives it, who frees it with
//! `TRITONSERVER_ErrorDelete`.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr, CString};

use nereid_core::{Error, ErrorKind};

/// Triton's `TRITONSERVER_Error_Code`, with its values.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TRITONSERVER_Error_Code {
    /// `TRITONSERVER_ERROR_UNKNOWN`
    Unknown = 0,
    /// `TRITONSERVER_ERROR_INTERNAL`
    Internal = 1,
    /// `TRITONSERVER_ERROR_NOT_FOUND`
    NotFound = 2,
    /// `TRITONSERVER_ERROR_INVALID_ARG`
    InvalidArg = 3,
    /// `TRITONSERVER_ERROR_UNAVAILABLE`
    Unavailable = 4,
    /// `TRITONSERVER_ERROR_UNSUPPORTED`
    Unsupported = 5,
    /// `TRITONSERVER_ERROR_ALREADY_EXISTS`
    AlreadyExists = 6,
    /// `TRITONSERVER_ERROR_CANCELLED`
    Cancelled = 7,
}

impl TRITONSERVER_Error_Code {
    /// The code a C caller passed, checked: an out-of-range value is `None`, never UB.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            0 => Self::Unknown,
            1 => Self::Internal,
            2 => Self::NotFound,
            3 => Self::InvalidArg,
            4 => Self::Unavailable,
            5 => Self::Unsupported,
            6 => Self::AlreadyExists,
            7 => Self::Cancelled,
            _ => return None,
        })
    }

    /// Triton's name for the code, as `TRITONSERVER_ErrorCodeString` returns it.
    fn name(self) -> &'static CStr {
        match self {
            Self::Unknown => c"Unknown",
            Self::Internal => c"Internal",
            Self::NotFound => c"Not found",
            Self::InvalidArg => c"Invalid argument",
            Self::Unavailable => c"Unavailable",
            Self::Unsupported => c"Unsupported",
            Self::AlreadyExists => c"Already exists",
            Self::Cancelled => c"Cancelled",
        }
    }
}

impl From<ErrorKind> for TRITONSERVER_Error_Code {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Internal => Self::Internal,
            ErrorKind::NotFound => Self::NotFound,
            ErrorKind::InvalidArg => Self::InvalidArg,
            ErrorKind::Unavailable => Self::Unavailable,
            ErrorKind::Unsupported => Self::Unsupported,
            ErrorKind::AlreadyExists => Self::AlreadyExists,
            ErrorKind::Cancelled => Self::Cancelled,
            ErrorKind::Unknown => Self::Unknown,
        }
    }
}

impl From<TRITONSERVER_Error_Code> for ErrorKind {
    fn from(code: TRITONSERVER_Error_Code) -> Self {
        match code {
            TRITONSERVER_Error_Code::Internal => Self::Internal,
            TRITONSERVER_Error_Code::NotFound => Self::NotFound,
            TRITONSERVER_Error_Code::InvalidArg => Self::InvalidArg,
            TRITONSERVER_Error_Code::Unavailable => Self::Unavailable,
            TRITONSERVER_Error_Code::Unsupported => Self::Unsupported,
            TRITONSERVER_Error_Code::AlreadyExists => Self::AlreadyExists,
            TRITONSERVER_Error_Code::Cancelled => Self::Cancelled,
            TRITONSERVER_Error_Code::Unknown => Self::Unknown,
        }
    }
}

/// The object behind a `TRITONSERVER_Error*`: a code and a NUL-terminated message that
/// lives as long as the error, as `TRITONSERVER_ErrorMessage` promises.
pub struct TRITONSERVER_Error {
    code: TRITONSERVER_Error_Code,
    message: CString,
}

/// What ABI functions return: null on success, else an owned error.
pub type ErrorPtr = *mut TRITONSERVER_Error;

/// A new error for C: the caller owns it.
pub fn new_error(code: TRITONSERVER_Error_Code, message: impl Into<String>) -> ErrorPtr {
    // An interior NUL would cut the message short in C; drop the NULs instead.
    let mut bytes = message.into().into_bytes();
    bytes.retain(|b| *b != 0);
    let message = CString::new(bytes).expect("NUL bytes were removed");
    Box::into_raw(Box::new(TRITONSERVER_Error { code, message }))
}

/// An invalid-argument error (a caller's mistake).
pub fn invalid_arg(message: impl Into<String>) -> ErrorPtr {
    new_error(TRITONSERVER_Error_Code::InvalidArg, message)
}

/// An internal error.
pub fn internal(message: impl Into<String>) -> ErrorPtr {
    new_error(TRITONSERVER_Error_Code::Internal, message)
}

/// An unsupported-operation error.
pub fn unsupported(message: impl Into<String>) -> ErrorPtr {
    new_error(TRITONSERVER_Error_Code::Unsupported, message)
}

/// A core error for C.
pub fn from_core(error: &Error) -> ErrorPtr {
    new_error(error.kind().into(), error.message())
}

/// Takes ownership of an error a C callee (a plugin) returned and turns it into a core
/// error; null (success) is `None`.
///
/// # Safety
/// `error` must be null or an error this library created and nobody else owns.
pub unsafe fn take(error: ErrorPtr) -> Option<Error> {
    if error.is_null() {
        return None;
    }
    // SAFETY: created by `new_error` (Box::into_raw) and now owned by us.
    let error = unsafe { Box::from_raw(error) };
    Some(Error::new(
        error.code.into(),
        error.message.to_string_lossy().into_owned(),
    ))
}

/// A C callee's error (or success) as a core result: plugins and backends hand the
/// ownership of the errors they return to their caller.
pub(crate) fn callee_result(error: ErrorPtr) -> Result<(), Error> {
    // SAFETY: an error a library returns comes from this process's
    // `TRITONSERVER_ErrorNew`, and its ownership passes to the caller.
    match unsafe { take(error) } {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// Reads an error a C caller still owns (one a backend passes to `ResponseSend` and
/// deletes itself afterwards) as a core error; null is `None`.
///
/// # Safety
/// `error` must be null or a live error this library created.
pub unsafe fn peek(error: ErrorPtr) -> Option<Error> {
    // SAFETY: null or a live error, by the caller's contract.
    let error = unsafe { error.as_ref() }?;
    Some(Error::new(
        error.code.into(),
        error.message.to_string_lossy().into_owned(),
    ))
}

/// `TRITONSERVER_ErrorNew`: a new error with `code` and a copy of `msg`. An unknown code
/// becomes `TRITONSERVER_ERROR_UNKNOWN`; a null message an empty one.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ErrorNew(code: u32, msg: *const c_char) -> ErrorPtr {
    let code = TRITONSERVER_Error_Code::from_raw(code).unwrap_or(TRITONSERVER_Error_Code::Unknown);
    let message = if msg.is_null() {
        String::new()
    } else {
        // SAFETY: the caller passes a NUL-terminated string (checked for null above).
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    new_error(code, message)
}

/// `TRITONSERVER_ErrorDelete`: frees an error; null is ignored.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ErrorDelete(error: ErrorPtr) {
    // SAFETY: the caller owns `error`, which this library created.
    drop(unsafe { take(error) });
}

/// `TRITONSERVER_ErrorCode`: the error's code (`UNKNOWN` for a null error).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ErrorCode(error: ErrorPtr) -> TRITONSERVER_Error_Code {
    // SAFETY: the caller passes an error this library created, or null.
    unsafe { error.as_ref() }.map_or(TRITONSERVER_Error_Code::Unknown, |e| e.code)
}

/// `TRITONSERVER_ErrorCodeString`: the code's name, a static string.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ErrorCodeString(error: ErrorPtr) -> *const c_char {
    // SAFETY: as for `TRITONSERVER_ErrorCode`.
    let code = unsafe { TRITONSERVER_ErrorCode(error) };
    code.name().as_ptr()
}

/// `TRITONSERVER_ErrorMessage`: the message, valid until the error is deleted (an empty
/// static string for a null error).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ErrorMessage(error: ErrorPtr) -> *const c_char {
    // SAFETY: the caller passes an error this library created, or null.
    match unsafe { error.as_ref() } {
        Some(e) => e.message.as_ptr(),
        None => c"".as_ptr(),
    }
}
