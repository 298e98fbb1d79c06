//! The TRITONBACKEND calls Nereid does not implement: each answers UNSUPPORTED and names
//! itself, so a backend that needs one fails with a clear message instead of a missing
//! symbol.
#![allow(unsafe_code)]

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
}
