//! `TRITONSERVER_BufferAttributes`: a buffer's size, memory type, device and CUDA IPC
//! handle, as one object C callers create, fill in and read back (cache plugins describe
//! the buffers of a cache entry with it).
#![allow(unsafe_code)]

use std::ffi::c_void;

use crate::error::ErrorPtr;
use crate::ffi;
use crate::types::memory_type;

/// The object behind a `TRITONSERVER_BufferAttributes*`. A new one describes an empty
/// buffer in CPU memory on device 0, as Triton's does.
#[derive(Debug)]
pub struct TRITONSERVER_BufferAttributes {
    /// `TRITONSERVER_MemoryType` value.
    pub memory_type: u32,
    /// Device id of the memory.
    pub memory_type_id: i64,
    /// Size in bytes.
    pub byte_size: usize,
    /// A CUDA IPC handle, stored and handed back, never used here.
    pub cuda_ipc_handle: *mut c_void,
}

impl Default for TRITONSERVER_BufferAttributes {
    fn default() -> Self {
        Self {
            memory_type: memory_type::CPU,
            memory_type_id: 0,
            byte_size: 0,
            cuda_ipc_handle: std::ptr::null_mut(),
        }
    }
}

type Attributes = TRITONSERVER_BufferAttributes;

/// Runs `body` on the attributes behind `attributes`, null-checked.
///
/// # Safety
/// A non-null `attributes` must be an object from `TRITONSERVER_BufferAttributesNew` that
/// nothing else uses during the call.
unsafe fn with(
    attributes: *mut Attributes,
    body: impl FnOnce(&mut Attributes) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: the caller's contract above; null is checked by `reference_mut`.
        let attributes = unsafe { ffi::reference_mut(attributes, "buffer_attributes") }?;
        body(attributes)
    })
}

/// `TRITONSERVER_BufferAttributesNew`: a new object the caller owns.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesNew(
    buffer_attributes: *mut *mut Attributes,
) -> ErrorPtr {
    ffi::status(|| {
        if buffer_attributes.is_null() {
            return Err(crate::error::invalid_arg(
                "buffer_attributes must not be null",
            ));
        }
        let created = Box::into_raw(Box::default());
        // SAFETY: a non-null out-parameter from the caller, checked above.
        unsafe { ffi::write(buffer_attributes, created, "buffer_attributes") }
    })
}

/// `TRITONSERVER_BufferAttributesDelete`: frees the object.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesDelete(
    buffer_attributes: *mut Attributes,
) -> ErrorPtr {
    ffi::status(|| {
        if buffer_attributes.is_null() {
            return Err(crate::error::invalid_arg(
                "buffer_attributes must not be null",
            ));
        }
        // SAFETY: created by `TRITONSERVER_BufferAttributesNew` and owned by the caller,
        // who gives it up here.
        drop(unsafe { Box::from_raw(buffer_attributes) });
        Ok(())
    })
}

/// `TRITONSERVER_BufferAttributesSetMemoryTypeId`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesSetMemoryTypeId(
    buffer_attributes: *mut Attributes,
    memory_type_id: i64,
) -> ErrorPtr {
    // SAFETY: forwarded caller contract.
    unsafe {
        with(buffer_attributes, |a| {
            a.memory_type_id = memory_type_id;
            Ok(())
        })
    }
}

/// `TRITONSERVER_BufferAttributesSetMemoryType`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesSetMemoryType(
    buffer_attributes: *mut Attributes,
    memory_type: u32,
) -> ErrorPtr {
    // SAFETY: forwarded caller contract.
    unsafe {
        with(buffer_attributes, |a| {
            a.memory_type = memory_type;
            Ok(())
        })
    }
}

/// `TRITONSERVER_BufferAttributesSetCudaIpcHandle`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesSetCudaIpcHandle(
    buffer_attributes: *mut Attributes,
    cuda_ipc_handle: *mut c_void,
) -> ErrorPtr {
    // SAFETY: forwarded caller contract.
    unsafe {
        with(buffer_attributes, |a| {
            a.cuda_ipc_handle = cuda_ipc_handle;
            Ok(())
        })
    }
}

/// `TRITONSERVER_BufferAttributesSetByteSize`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesSetByteSize(
    buffer_attributes: *mut Attributes,
    byte_size: usize,
) -> ErrorPtr {
    // SAFETY: forwarded caller contract.
    unsafe {
        with(buffer_attributes, |a| {
            a.byte_size = byte_size;
            Ok(())
        })
    }
}

/// `TRITONSERVER_BufferAttributesMemoryTypeId`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesMemoryTypeId(
    buffer_attributes: *mut Attributes,
    memory_type_id: *mut i64,
) -> ErrorPtr {
    // SAFETY: forwarded caller contract; the out-parameter is checked by `write`.
    unsafe {
        with(buffer_attributes, |a| {
            ffi::write(memory_type_id, a.memory_type_id, "memory_type_id")
        })
    }
}

/// `TRITONSERVER_BufferAttributesMemoryType`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesMemoryType(
    buffer_attributes: *mut Attributes,
    memory_type: *mut u32,
) -> ErrorPtr {
    // SAFETY: forwarded caller contract; the out-parameter is checked by `write`.
    unsafe {
        with(buffer_attributes, |a| {
            ffi::write(memory_type, a.memory_type, "memory_type")
        })
    }
}

/// `TRITONSERVER_BufferAttributesCudaIpcHandle`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesCudaIpcHandle(
    buffer_attributes: *mut Attributes,
    cuda_ipc_handle: *mut *mut c_void,
) -> ErrorPtr {
    // SAFETY: forwarded caller contract; the out-parameter is checked by `write`.
    unsafe {
        with(buffer_attributes, |a| {
            ffi::write(cuda_ipc_handle, a.cuda_ipc_handle, "cuda_ipc_handle")
        })
    }
}

/// `TRITONSERVER_BufferAttributesByteSize`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_BufferAttributesByteSize(
    buffer_attributes: *mut Attributes,
    byte_size: *mut usize,
) -> ErrorPtr {
    // SAFETY: forwarded caller contract; the out-parameter is checked by `write`.
    unsafe {
        with(buffer_attributes, |a| {
            ffi::write(byte_size, a.byte_size, "byte_size")
        })
    }
}
