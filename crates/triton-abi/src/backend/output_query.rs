//! `TRITONBACKEND_RequestOutputBufferProperties`: a backend asks, before it allocates an
//! output, where the request's caller will take it (the caller's allocator query through
//! the in-process API, the output's shared-memory region through HTTP and gRPC, see
//! `nereid_core::output_query`).
#![allow(unsafe_code)]

use std::ffi::c_char;

use nereid_core::output_query::Placement;

use super::request::{with_request, TRITONBACKEND_Request};
use crate::error::{from_core, invalid_arg, new_error, ErrorPtr, TRITONSERVER_Error_Code};
use crate::ffi;
use crate::types::{memory_kind_of, memory_type_of};

/// `TRITONBACKEND_RequestOutputBufferProperties`: `memory_type` and `memory_type_id`
/// carry the backend's preference in and the caller's answer out; `name` (null: any
/// output) and `byte_size` (null: not known) are optional. Without anyone to answer,
/// Triton's UNAVAILABLE "Output properties are not available".
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestOutputBufferProperties(
    request: *mut TRITONBACKEND_Request,
    name: *const c_char,
    byte_size: *mut usize,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> ErrorPtr {
    with_request(request, |r| {
        if memory_type.is_null() || memory_type_id.is_null() {
            return Err(invalid_arg(
                "memory_type and memory_type_id must not be null",
            ));
        }
        let Some(query) = &r.output_query else {
            return Err(new_error(
                TRITONSERVER_Error_Code::Unavailable,
                format!("{}Output properties are not available", r.log_prefix()),
            ));
        };
        // SAFETY: a NUL-terminated name or null.
        let name = (!name.is_null())
            .then(|| unsafe { ffi::text(name, "name") })
            .transpose()?;
        // SAFETY: non-null out-parameters are valid for reads and writes (the backend's).
        let (size, raw_kind, id) = unsafe {
            (
                byte_size.as_ref().copied(),
                memory_type.read(),
                memory_type_id.read(),
            )
        };
        let kind = memory_kind_of(raw_kind)
            .ok_or_else(|| invalid_arg(format!("unknown memory type {raw_kind}")))?;
        let placement = query
            .query(name, size, Placement { kind, id })
            .map_err(|e| from_core(&e))?;
        // SAFETY: checked for null above; the backend's out-parameters.
        unsafe {
            memory_type.write(memory_type_of(placement.kind));
            memory_type_id.write(placement.id);
        }
        Ok(())
    })
}
