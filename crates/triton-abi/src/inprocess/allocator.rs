//! `TRITONSERVER_ResponseAllocator`: the caller's functions that provide (and take back)
//! the memory each output tensor of a response is written into.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use nereid_core::output_query::{OutputQuery, Placement};

use crate::error::{callee_result, invalid_arg, ErrorPtr};
use crate::ffi;
use crate::types::{memory_kind_of, memory_type_of};

/// `TRITONSERVER_ResponseAllocatorAllocFn_t`.
pub type AllocFn = unsafe extern "C" fn(
    allocator: *mut TRITONSERVER_ResponseAllocator,
    tensor_name: *const c_char,
    byte_size: usize,
    memory_type: u32,
    memory_type_id: i64,
    userp: *mut c_void,
    buffer: *mut *mut c_void,
    buffer_userp: *mut *mut c_void,
    actual_memory_type: *mut u32,
    actual_memory_type_id: *mut i64,
) -> ErrorPtr;

/// `TRITONSERVER_ResponseAllocatorReleaseFn_t`.
pub type ReleaseFn = unsafe extern "C" fn(
    allocator: *mut TRITONSERVER_ResponseAllocator,
    buffer: *mut c_void,
    buffer_userp: *mut c_void,
    byte_size: usize,
    memory_type: u32,
    memory_type_id: i64,
) -> ErrorPtr;

/// `TRITONSERVER_ResponseAllocatorStartFn_t`.
pub type StartFn = unsafe extern "C" fn(
    allocator: *mut TRITONSERVER_ResponseAllocator,
    userp: *mut c_void,
) -> ErrorPtr;

/// `TRITONSERVER_ResponseAllocatorQueryFn_t`.
pub type QueryFn = unsafe extern "C" fn(
    allocator: *mut TRITONSERVER_ResponseAllocator,
    userp: *mut c_void,
    tensor_name: *const c_char,
    byte_size: *mut usize,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> ErrorPtr;

/// `TRITONSERVER_ResponseAllocatorBufferAttributesFn_t` (its attributes argument is an
/// opaque pointer here; the buffer-attributes object belongs to another module).
pub type BufferAttributesFn = unsafe extern "C" fn(
    allocator: *mut TRITONSERVER_ResponseAllocator,
    tensor_name: *const c_char,
    buffer_attributes: *mut c_void,
    userp: *mut c_void,
    buffer_userp: *mut c_void,
) -> ErrorPtr;

/// The object behind `TRITONSERVER_ResponseAllocator*`: the caller's functions.
#[derive(Clone, Copy)]
pub struct TRITONSERVER_ResponseAllocator {
    /// Provides an output's buffer.
    pub(crate) alloc_fn: AllocFn,
    /// Takes a buffer back when its response is deleted.
    pub(crate) release_fn: ReleaseFn,
    /// Called once per response before its first allocation.
    pub(crate) start_fn: Option<StartFn>,
    /// Answers a backend asking where an output will go (see [`CallerQuery`]).
    query_fn: Option<QueryFn>,
    /// Stored: Nereid writes outputs to CPU memory and needs no extra attributes.
    #[allow(dead_code)] // kept so the setter has its effect if a later use needs it
    buffer_attributes_fn: Option<BufferAttributesFn>,
}

/// `TRITONSERVER_ResponseAllocatorNew`: an allocator over the caller's functions
/// (`start_fn` may be null).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ResponseAllocatorNew(
    allocator: *mut *mut TRITONSERVER_ResponseAllocator,
    alloc_fn: Option<AllocFn>,
    release_fn: Option<ReleaseFn>,
    start_fn: Option<StartFn>,
) -> ErrorPtr {
    ffi::status(|| {
        if allocator.is_null() {
            return Err(invalid_arg("allocator must not be null"));
        }
        let alloc_fn = alloc_fn.ok_or_else(|| invalid_arg("alloc_fn must not be null"))?;
        let release_fn = release_fn.ok_or_else(|| invalid_arg("release_fn must not be null"))?;
        let created = Box::into_raw(Box::new(TRITONSERVER_ResponseAllocator {
            alloc_fn,
            release_fn,
            start_fn,
            query_fn: None,
            buffer_attributes_fn: None,
        }));
        // SAFETY: checked for null above; the caller owns the new allocator.
        unsafe { allocator.write(created) };
        Ok(())
    })
}

/// `TRITONSERVER_ResponseAllocatorSetQueryFunction`: stores the query function.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ResponseAllocatorSetQueryFunction(
    allocator: *mut TRITONSERVER_ResponseAllocator,
    query_fn: Option<QueryFn>,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live allocator from this module, or null (checked).
        unsafe { ffi::reference_mut(allocator, "allocator") }?.query_fn = query_fn;
        Ok(())
    })
}

/// `TRITONSERVER_ResponseAllocatorSetBufferAttributesFunction`: stores the function.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ResponseAllocatorSetBufferAttributesFunction(
    allocator: *mut TRITONSERVER_ResponseAllocator,
    buffer_attributes_fn: Option<BufferAttributesFn>,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live allocator from this module, or null (checked).
        unsafe { ffi::reference_mut(allocator, "allocator") }?.buffer_attributes_fn =
            buffer_attributes_fn;
        Ok(())
    })
}

/// `TRITONSERVER_ResponseAllocatorDelete`: frees the allocator (null is ignored).
/// Responses keep their own copy of the release function, so deleting the allocator
/// while responses are alive is safe here.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ResponseAllocatorDelete(
    allocator: *mut TRITONSERVER_ResponseAllocator,
) -> ErrorPtr {
    if !allocator.is_null() {
        // SAFETY: created by `TRITONSERVER_ResponseAllocatorNew` and owned by the caller.
        drop(unsafe { Box::from_raw(allocator) });
    }
    std::ptr::null_mut()
}

/// A request's allocator query function, as the core asks it when a backend calls
/// `TRITONBACKEND_RequestOutputBufferProperties` (Triton forwards that call the same way).
#[derive(Debug)]
pub(crate) struct CallerQuery {
    allocator: *mut TRITONSERVER_ResponseAllocator,
    userp: *mut c_void,
    query: QueryFn,
}

// SAFETY: Triton's contract for a response allocator: it and its user pointer stay valid
// while requests using them are in flight, and its functions may be called from any
// thread (Triton's backends call them from their own).
unsafe impl Send for CallerQuery {}
// SAFETY: as for `Send`; the fields are only read.
unsafe impl Sync for CallerQuery {}

impl CallerQuery {
    /// The query function of a request's `allocator` (null: none) with its user pointer
    /// `userp`, if it has one.
    pub(crate) fn of(
        allocator: *mut TRITONSERVER_ResponseAllocator,
        userp: *mut c_void,
    ) -> Option<Arc<dyn OutputQuery>> {
        // SAFETY: the caller's allocator stays alive while its requests are in flight.
        let query = unsafe { allocator.as_ref() }?.query_fn?;
        Some(Arc::new(Self {
            allocator,
            userp,
            query,
        }))
    }
}

impl OutputQuery for CallerQuery {
    fn query(
        &self,
        name: Option<&str>,
        byte_size: Option<usize>,
        preferred: Placement,
    ) -> nereid_core::Result<Placement> {
        let name = name.map(super::parameter::c_string);
        let mut size = byte_size.unwrap_or(0);
        let mut kind = memory_type_of(preferred.kind);
        let mut id = preferred.id;
        // SAFETY: the caller's query function (valid while the request is in flight, see
        // above) with its allocator and user pointer, a NUL-terminated name or null, and
        // out-parameters that live across the call.
        let error = unsafe {
            (self.query)(
                self.allocator,
                self.userp,
                name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                if byte_size.is_some() {
                    &mut size
                } else {
                    std::ptr::null_mut()
                },
                &mut kind,
                &mut id,
            )
        };
        callee_result(error)?;
        let kind = memory_kind_of(kind).ok_or_else(|| {
            nereid_core::Error::invalid_arg(format!(
                "the response allocator's query answered an unknown memory type {kind}"
            ))
        })?;
        Ok(Placement { kind, id })
    }
}
