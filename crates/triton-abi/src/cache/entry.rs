//! `TRITONCACHE_CacheEntry`: the list of buffers Nereid and a cache plugin pass each other
//! on insert and lookup, and the entry functions plugins call, with Triton's checks and
//! messages (core `src/tritoncache.cc`).
#![allow(unsafe_code)]

use std::ffi::c_void;

use crate::buffer_attributes::TRITONSERVER_BufferAttributes;
use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi;
use crate::types::memory_type;

/// `TRITONCACHE_API_VERSION_MAJOR` of the header this library implements.
pub const API_VERSION_MAJOR: u32 = 0;
/// `TRITONCACHE_API_VERSION_MINOR` of the header this library implements.
pub const API_VERSION_MINOR: u32 = 1;

/// One buffer of an entry: its base and size. The entry never owns the memory: on insert
/// it points at Nereid's encoded bytes (or at buffers the plugin set), on lookup at the
/// plugin's memory until Nereid copies it.
#[derive(Debug, Clone, Copy)]
pub struct Buffer {
    /// Start of the bytes.
    pub base: *mut c_void,
    /// Length in bytes.
    pub byte_size: usize,
}

/// The object behind a `TRITONCACHE_CacheEntry*`.
#[derive(Debug, Default)]
pub struct TRITONCACHE_CacheEntry {
    /// The buffers, in order.
    pub buffers: Vec<Buffer>,
}

/// Triton's check of a buffer's memory: only CPU (or pinned CPU) memory can be cached.
fn check_cpu(memory: u32) -> Result<(), ErrorPtr> {
    if memory == memory_type::CPU || memory == memory_type::CPU_PINNED {
        Ok(())
    } else {
        Err(invalid_arg(
            "Only buffers in CPU memory are allowed in cache currently",
        ))
    }
}

/// `TRITONCACHE_ApiVersion`: the TRITONCACHE API version this library implements.
#[no_mangle]
pub unsafe extern "C" fn TRITONCACHE_ApiVersion(major: *mut u32, minor: *mut u32) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: out-parameters from the caller, checked for null by `write`.
        unsafe {
            ffi::write(major, API_VERSION_MAJOR, "major")?;
            ffi::write(minor, API_VERSION_MINOR, "minor")
        }
    })
}

/// `TRITONCACHE_CacheEntryBufferCount`: how many buffers the entry holds.
#[no_mangle]
pub unsafe extern "C" fn TRITONCACHE_CacheEntryBufferCount(
    entry: *mut TRITONCACHE_CacheEntry,
    count: *mut usize,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: an entry Nereid passed to the plugin, or null (checked).
        let entry = unsafe { entry.as_ref() }.ok_or_else(|| invalid_arg("entry was nullptr"))?;
        // SAFETY: out-parameter from the caller, checked for null by `write`.
        unsafe { ffi::write(count, entry.buffers.len(), "count") }
    })
}

/// `TRITONCACHE_CacheEntryAddBuffer`: appends `base` with the size and memory type of
/// `attrs` (non-empty, CPU memory). The entry only refers to the memory.
#[no_mangle]
pub unsafe extern "C" fn TRITONCACHE_CacheEntryAddBuffer(
    entry: *mut TRITONCACHE_CacheEntry,
    base: *mut c_void,
    attrs: *mut TRITONSERVER_BufferAttributes,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: an entry Nereid passed and attributes the plugin created, or null.
        let (entry, attrs) = unsafe { (entry.as_mut(), attrs.as_ref()) };
        let (Some(entry), Some(attrs), false) = (entry, attrs, base.is_null()) else {
            return Err(invalid_arg("entry, base, or attrs was nullptr"));
        };
        if attrs.byte_size == 0 {
            return Err(invalid_arg("Buffer byte size was zero"));
        }
        check_cpu(attrs.memory_type)?;
        entry.buffers.push(Buffer {
            base,
            byte_size: attrs.byte_size,
        });
        Ok(())
    })
}

/// `TRITONCACHE_CacheEntryGetBuffer`: the base of buffer `index`, with its size, CPU
/// memory and device 0 written into the caller's `attrs`.
#[no_mangle]
pub unsafe extern "C" fn TRITONCACHE_CacheEntryGetBuffer(
    entry: *mut TRITONCACHE_CacheEntry,
    index: usize,
    base: *mut *mut c_void,
    attrs: *mut TRITONSERVER_BufferAttributes,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: an entry Nereid passed and attributes the plugin created, or null.
        let (entry, attrs) = unsafe { (entry.as_ref(), attrs.as_mut()) };
        let (Some(entry), Some(attrs), false) = (entry, attrs, base.is_null()) else {
            return Err(invalid_arg("entry, base, or attrs was nullptr"));
        };
        let buffer = entry
            .buffers
            .get(index)
            .ok_or_else(|| invalid_arg("index was greater than count"))?;
        // SAFETY: non-null out-parameter (checked above).
        unsafe { ffi::write(base, buffer.base, "base") }?;
        attrs.byte_size = buffer.byte_size;
        attrs.memory_type = memory_type::CPU;
        attrs.memory_type_id = 0;
        Ok(())
    })
}

/// `TRITONCACHE_CacheEntrySetBuffer`: points buffer `index` at `new_base` (a plugin's own
/// memory for Nereid to copy into); `attrs`, when given, replaces the size.
#[no_mangle]
pub unsafe extern "C" fn TRITONCACHE_CacheEntrySetBuffer(
    entry: *mut TRITONCACHE_CacheEntry,
    index: usize,
    new_base: *mut c_void,
    attrs: *mut TRITONSERVER_BufferAttributes,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: an entry Nereid passed, or null (checked).
        let entry = unsafe { entry.as_mut() }.ok_or_else(|| invalid_arg("entry was nullptr"))?;
        let buffer = entry
            .buffers
            .get_mut(index)
            .ok_or_else(|| invalid_arg("index was greater than count"))?;
        buffer.base = new_base;
        // SAFETY: attributes the plugin created, or null (then the size stays).
        if let Some(attrs) = unsafe { attrs.as_ref() } {
            buffer.byte_size = attrs.byte_size;
            check_cpu(attrs.memory_type)?;
        }
        Ok(())
    })
}
