//! The parts of `tritonserver.h` Nereid does not implement in-process: inference tracing
//! (custom metrics are in [`crate::metrics`]). Each function exists so that programs link,
//! checks nothing it cannot use, and answers `TRITONSERVER_ERROR_UNSUPPORTED` naming
//! itself, as a Triton build without tracing answers.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};

use crate::error::{unsupported, ErrorPtr};

/// Defines functions that only answer UNSUPPORTED with `$why`.
macro_rules! unsupported_fns {
    ($why:literal: $($(#[$meta:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ErrorPtr {
            $(let _ = $arg;)*
            unsupported(concat!(stringify!($name), " is not supported by Nereid: ", $why))
        }
    )*};
}

unsupported_fns! {
    "inference tracing not supported":
    /// `TRITONSERVER_InferenceTraceNew`: unsupported.
    TRITONSERVER_InferenceTraceNew(trace: *mut *mut c_void, level: u32, parent_id: u64, activity_fn: *mut c_void, release_fn: *mut c_void, userp: *mut c_void);
    /// `TRITONSERVER_InferenceTraceTensorNew`: unsupported.
    TRITONSERVER_InferenceTraceTensorNew(trace: *mut *mut c_void, level: u32, parent_id: u64, activity_fn: *mut c_void, tensor_fn: *mut c_void, release_fn: *mut c_void, userp: *mut c_void);
    /// `TRITONSERVER_InferenceTraceReportActivity`: unsupported.
    TRITONSERVER_InferenceTraceReportActivity(trace: *mut c_void, timestamp: u64, name: *const c_char);
    /// `TRITONSERVER_InferenceTraceDelete`: unsupported.
    TRITONSERVER_InferenceTraceDelete(trace: *mut c_void);
    /// `TRITONSERVER_InferenceTraceId`: unsupported.
    TRITONSERVER_InferenceTraceId(trace: *mut c_void, id: *mut u64);
    /// `TRITONSERVER_InferenceTraceParentId`: unsupported.
    TRITONSERVER_InferenceTraceParentId(trace: *mut c_void, parent_id: *mut u64);
    /// `TRITONSERVER_InferenceTraceModelName`: unsupported.
    TRITONSERVER_InferenceTraceModelName(trace: *mut c_void, model_name: *mut *const c_char);
    /// `TRITONSERVER_InferenceTraceModelVersion`: unsupported.
    TRITONSERVER_InferenceTraceModelVersion(trace: *mut c_void, model_version: *mut i64);
    /// `TRITONSERVER_InferenceTraceRequestId`: unsupported.
    TRITONSERVER_InferenceTraceRequestId(trace: *mut c_void, request_id: *mut *const c_char);
    /// `TRITONSERVER_InferenceTraceSpawnChildTrace`: unsupported.
    TRITONSERVER_InferenceTraceSpawnChildTrace(trace: *mut c_void, child: *mut *mut c_void);
    /// `TRITONSERVER_InferenceTraceSetContext`: unsupported.
    TRITONSERVER_InferenceTraceSetContext(trace: *mut c_void, context: *const c_char);
    /// `TRITONSERVER_InferenceTraceContext`: unsupported.
    TRITONSERVER_InferenceTraceContext(trace: *mut c_void, context: *mut *const c_char);
}

/// `TRITONSERVER_InferenceTraceLevelString`: the level's name.
#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceTraceLevelString(level: u32) -> *const c_char {
    match level {
        0 => c"DISABLED".as_ptr(),
        1 => c"MIN".as_ptr(),
        2 => c"MAX".as_ptr(),
        4 => c"TIMESTAMPS".as_ptr(),
        8 => c"TENSORS".as_ptr(),
        _ => c"<unknown>".as_ptr(),
    }
}

/// Names of `TRITONSERVER_InferenceTraceActivity` values, in order.
const ACTIVITIES: [&std::ffi::CStr; 11] = [
    c"REQUEST_START",
    c"QUEUE_START",
    c"COMPUTE_START",
    c"COMPUTE_INPUT_END",
    c"COMPUTE_OUTPUT_START",
    c"COMPUTE_END",
    c"REQUEST_END",
    c"TENSOR_QUEUE_INPUT",
    c"TENSOR_BACKEND_INPUT",
    c"TENSOR_BACKEND_OUTPUT",
    c"CUSTOM_ACTIVITY",
];

/// `TRITONSERVER_InferenceTraceActivityString`: the activity's name.
#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceTraceActivityString(activity: u32) -> *const c_char {
    ACTIVITIES
        .get(activity as usize)
        .map_or(c"<unknown>".as_ptr(), |name| name.as_ptr())
}
