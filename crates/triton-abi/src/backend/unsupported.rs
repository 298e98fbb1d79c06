//! The TRITONBACKEND calls Nereid does not implement: each answers UNSUPPORTED and names
//! itself, so a backend that needs one fails with a clear message instead of a missing
//! symbol.

use std::ffi::{c_char, c_void};

use crate::error::{unsupported, ErrorPtr};

macro_rules! unsupported_calls {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            $(#[$doc])*
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> ErrorPtr {
                $(let _ = $arg;)*
                unsupported(concat!(stringify!($name), " is not supported by Nereid"))
            }
        )*
    };
}

unsupported_calls! {
    /// `TRITONBACKEND_RequestOutputBufferProperties`: output buffers are allocated when a
    /// response asks for them.
    TRITONBACKEND_RequestOutputBufferProperties(request: *mut c_void, name: *const c_char, byte_size: *mut usize, memory_type: *mut u32, memory_type_id: *mut i64);
    /// `TRITONBACKEND_ModelInstanceResponseStatisticsNew`: per-response statistics are not
    /// kept.
    TRITONBACKEND_ModelInstanceResponseStatisticsNew(response_statistics: *mut *mut c_void);
    /// `TRITONBACKEND_ModelInstanceResponseStatisticsDelete`: see `…New`.
    TRITONBACKEND_ModelInstanceResponseStatisticsDelete(response_statistics: *mut c_void);
    /// `TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance`: see `…New`.
    TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(response_statistics: *mut c_void, model_instance: *mut c_void);
    /// `TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory`: see `…New`.
    TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(response_statistics: *mut c_void, response_factory: *mut c_void);
    /// `TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart`: see `…New`.
    TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(response_statistics: *mut c_void, response_start: u64);
    /// `TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart`: see `…New`.
    TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(response_statistics: *mut c_void, compute_output_start: u64);
    /// `TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd`: see `…New`.
    TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(response_statistics: *mut c_void, response_end: u64);
    /// `TRITONBACKEND_ModelInstanceResponseStatisticsSetError`: see `…New`.
    TRITONBACKEND_ModelInstanceResponseStatisticsSetError(response_statistics: *mut c_void, error: ErrorPtr);
    /// `TRITONBACKEND_ModelInstanceReportResponseStatistics`: see `…New`.
    TRITONBACKEND_ModelInstanceReportResponseStatistics(response_statistics: *mut c_void);
}
