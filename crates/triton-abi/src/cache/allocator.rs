//! `TRITONCACHE_Allocator` and `TRITONCACHE_Copy`: the callback a plugin makes so Nereid
//! copies bytes between its own memory and the buffers of an entry, in the direction of
//! the call (core `src/cache_manager.cc`: into the cache's buffers on insert, out of them
//! on lookup).
#![allow(unsafe_code)]

use crate::error::{internal, invalid_arg, ErrorPtr};
use crate::ffi;

use super::entry::TRITONCACHE_CacheEntry;

/// The object behind a `TRITONCACHE_Allocator*`, one per insert or lookup call.
#[derive(Debug)]
pub enum TRITONCACHE_Allocator {
    /// An insert: the bytes to store, one per entry buffer.
    Insert(Vec<Vec<u8>>),
    /// A lookup: what the plugin's entry held when it called `TRITONCACHE_Copy`.
    Lookup(Option<Vec<Vec<u8>>>),
}

impl TRITONCACHE_Allocator {
    /// Copies between Nereid's bytes and the entry's buffers.
    fn copy(&mut self, entry: &TRITONCACHE_CacheEntry) -> Result<(), ErrorPtr> {
        match self {
            Self::Insert(sources) => copy_into(sources, entry),
            Self::Lookup(copied) => {
                *copied = Some(copy_out(entry)?);
                Ok(())
            }
        }
    }
}

/// Copies `sources` into the entry's buffers (the plugin's memory after
/// `TRITONCACHE_CacheEntrySetBuffer`), which must have the same count and sizes.
fn copy_into(sources: &[Vec<u8>], entry: &TRITONCACHE_CacheEntry) -> Result<(), ErrorPtr> {
    if sources.len() != entry.buffers.len() {
        return Err(internal(format!(
            "Expected number of buffers in cache does not match. Expected: {}, received: {}",
            sources.len(),
            entry.buffers.len()
        )));
    }
    for (source, target) in sources.iter().zip(&entry.buffers) {
        if source.len() != target.byte_size {
            return Err(internal(format!(
                "Expected size of buffer in cache does not match. Expected: {}, received: {}",
                source.len(),
                target.byte_size
            )));
        }
        let target = target.base.cast::<u8>();
        if std::ptr::eq(target, source.as_ptr()) {
            continue; // the plugin kept Nereid's own buffer
        }
        if target.is_null() {
            return Err(internal("buffer was nullptr"));
        }
        // SAFETY: the plugin set `target` to memory of `byte_size` writable bytes, which
        // equals the source's length (checked above); the two do not overlap since the
        // source is Nereid's own allocation.
        unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), target, source.len()) };
    }
    Ok(())
}

/// Copies every buffer of the entry (the plugin's memory) into bytes Nereid owns.
fn copy_out(entry: &TRITONCACHE_CacheEntry) -> Result<Vec<Vec<u8>>, ErrorPtr> {
    entry
        .buffers
        .iter()
        .map(|buffer| {
            if buffer.base.is_null() {
                return Err(internal("buffer was nullptr"));
            }
            // SAFETY: the plugin added `base` with `byte_size` readable bytes that stay
            // valid for the duration of the insert or lookup call.
            let bytes =
                unsafe { std::slice::from_raw_parts(buffer.base.cast::<u8>(), buffer.byte_size) };
            Ok(bytes.to_vec())
        })
        .collect()
}

/// `TRITONCACHE_Copy`: copies between Nereid and the entry's buffers, into the plugin's
/// buffers during an insert and out of them during a lookup.
#[no_mangle]
pub unsafe extern "C" fn TRITONCACHE_Copy(
    allocator: *mut TRITONCACHE_Allocator,
    entry: *mut TRITONCACHE_CacheEntry,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: the allocator and entry Nereid passed to this insert or lookup, or null.
        let (allocator, entry) = unsafe { (allocator.as_mut(), entry.as_ref()) };
        let (Some(allocator), Some(entry)) = (allocator, entry) else {
            return Err(invalid_arg("allocator or entry was nullptr"));
        };
        allocator.copy(entry)
    })
}
