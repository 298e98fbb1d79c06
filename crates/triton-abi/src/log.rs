//! `TRITONSERVER_LogIsEnabled` and `TRITONSERVER_LogMessage`: what a plugin or an
//! in-process caller logs goes to Nereid's own log (`tracing`), at the matching level,
//! with the caller's file and line.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr};

use tracing::Level;

use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi;

/// `TRITONSERVER_LogLevel` values.
pub mod level {
    /// `TRITONSERVER_LOG_INFO`
    pub const INFO: u32 = 0;
    /// `TRITONSERVER_LOG_WARN`
    pub const WARN: u32 = 1;
    /// `TRITONSERVER_LOG_ERROR`
    pub const ERROR: u32 = 2;
    /// `TRITONSERVER_LOG_VERBOSE`
    pub const VERBOSE: u32 = 3;
}

/// The `tracing` level of a Triton log level (verbose is debug); `None` when unknown.
fn tracing_level(raw: u32) -> Option<Level> {
    match raw {
        level::INFO => Some(Level::INFO),
        level::WARN => Some(Level::WARN),
        level::ERROR => Some(Level::ERROR),
        level::VERBOSE => Some(Level::DEBUG),
        _ => None,
    }
}

/// Whether a message at `level` would be written.
fn enabled(level: Level) -> bool {
    match level {
        Level::ERROR => tracing::enabled!(Level::ERROR),
        Level::WARN => tracing::enabled!(Level::WARN),
        Level::INFO => tracing::enabled!(Level::INFO),
        Level::DEBUG => tracing::enabled!(Level::DEBUG),
        Level::TRACE => tracing::enabled!(Level::TRACE),
    }
}

/// `TRITONSERVER_LogIsEnabled`: whether messages at `level` are written.
#[no_mangle]
pub extern "C" fn TRITONSERVER_LogIsEnabled(level: u32) -> bool {
    tracing_level(level).is_some_and(enabled)
}

/// `TRITONSERVER_LogMessage`: writes `msg` at `level`, naming `filename:line` as where it
/// came from. A null file name is logged as empty; an unknown level is Triton's
/// invalid-argument error, a null message an invalid-argument error.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_LogMessage(
    level: u32,
    filename: *const c_char,
    line: i32,
    msg: *const c_char,
) -> ErrorPtr {
    ffi::status(|| {
        let level = tracing_level(level)
            .ok_or_else(|| invalid_arg(format!("unknown logging level '{level}'")))?;
        if msg.is_null() {
            return Err(invalid_arg("msg must not be null"));
        }
        // SAFETY: non-null, NUL-terminated by the caller's contract.
        let message = unsafe { CStr::from_ptr(msg) }.to_string_lossy();
        let file = if filename.is_null() {
            Default::default()
        } else {
            // SAFETY: non-null, NUL-terminated by the caller's contract.
            unsafe { CStr::from_ptr(filename) }.to_string_lossy()
        };
        match level {
            Level::ERROR => tracing::error!(file = %file, line, "{message}"),
            Level::WARN => tracing::warn!(file = %file, line, "{message}"),
            Level::INFO => tracing::info!(file = %file, line, "{message}"),
            _ => tracing::debug!(file = %file, line, "{message}"),
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{TRITONSERVER_ErrorDelete, TRITONSERVER_ErrorMessage};

    #[test]
    fn unknown_levels_and_null_messages_are_refused() {
        // SAFETY: static C strings; the errors are read and freed here.
        unsafe {
            assert!(
                TRITONSERVER_LogMessage(level::INFO, c"f.c".as_ptr(), 1, c"hi".as_ptr()).is_null()
            );
            let error = TRITONSERVER_LogMessage(7, std::ptr::null(), 1, c"hi".as_ptr());
            let message = CStr::from_ptr(TRITONSERVER_ErrorMessage(error)).to_owned();
            TRITONSERVER_ErrorDelete(error);
            assert_eq!(message.to_str(), Ok("unknown logging level '7'"));
            let error = TRITONSERVER_LogMessage(level::WARN, std::ptr::null(), 1, std::ptr::null());
            assert!(!error.is_null());
            TRITONSERVER_ErrorDelete(error);
        }
        assert!(!TRITONSERVER_LogIsEnabled(9));
    }
}
