//! One loaded TRITONCACHE library: `dlopen` with Triton's flags, its four required entry
//! points, `TRITONCACHE_CacheInitialize` with the JSON config and
//! `TRITONCACHE_CacheFinalize` on drop (core `src/cache_manager.cc`, `TritonCache`).
//! Errors a plugin returns become core errors; nothing a plugin does can unwind into
//! Nereid.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use libloading::os::unix::Library;
use nereid_core::{Error, ErrorKind, Result};

use super::allocator::TRITONCACHE_Allocator;
use super::entry::{Buffer, TRITONCACHE_CacheEntry};
use crate::dl::{dlerror_text, entry_point};
use crate::error::{callee_result as result, ErrorPtr};

type InitializeFn = unsafe extern "C" fn(*mut *mut c_void, *const c_char) -> ErrorPtr;
type FinalizeFn = unsafe extern "C" fn(*mut c_void) -> ErrorPtr;
type CallFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    *mut TRITONCACHE_CacheEntry,
    *mut TRITONCACHE_Allocator,
) -> ErrorPtr;

/// A cache plugin, initialized; finalized and unloaded on drop.
pub struct CacheLibrary {
    path: PathBuf,
    cache: *mut c_void,
    finalize: FinalizeFn,
    insert: CallFn,
    lookup: CallFn,
    // Last, so the library is unloaded after everything above (its code) is done with.
    _library: Library,
}

// SAFETY: a TRITONCACHE library must accept calls from any thread at the same time (Triton
// calls Insert and Lookup from every model instance's thread); the handle is only passed
// back to the library.
unsafe impl Send for CacheLibrary {}
// SAFETY: as for Send.
unsafe impl Sync for CacheLibrary {}

impl CacheLibrary {
    /// Loads cache `name`'s library at `path` and initializes a cache with `config`
    /// (JSON).
    pub fn load(name: &str, path: &Path, config: &str) -> Result<Self> {
        tracing::info!(
            "Creating TritonCache with name: '{name}', libpath: '{}', cache_config: '{config}'",
            path.display()
        );
        // SAFETY: loading a library runs its initializers; a cache library is code the
        // operator chose to run in this process, as with Triton.
        let library = unsafe { crate::dl::open_plugin(path) }.map_err(|e| {
            Error::new(
                ErrorKind::NotFound,
                format!("unable to load shared library: {}", dlerror_text(&e)),
            )
        })?;
        // SAFETY: the signatures are those of `tritoncache.h`.
        let (initialize, finalize, lookup, insert) = unsafe {
            (
                entry_point::<InitializeFn>(&library, "TRITONCACHE_CacheInitialize")?,
                entry_point::<FinalizeFn>(&library, "TRITONCACHE_CacheFinalize")?,
                entry_point::<CallFn>(&library, "TRITONCACHE_CacheLookup")?,
                entry_point::<CallFn>(&library, "TRITONCACHE_CacheInsert")?,
            )
        };
        let config = CString::new(config)
            .map_err(|_| Error::invalid_arg("the cache config contains a NUL byte"))?;
        let mut cache = std::ptr::null_mut();
        // SAFETY: Initialize's contract: an out-pointer and a NUL-terminated config.
        result(unsafe { initialize(&mut cache, config.as_ptr()) })?;
        if cache.is_null() {
            return Err(Error::internal("Failed to initialize cache implementation"));
        }
        Ok(Self {
            path: path.to_path_buf(),
            cache,
            finalize,
            insert,
            lookup,
            _library: library,
        })
    }

    /// The library's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores `buffers` under `key`; the plugin copies them during the call.
    pub fn insert(&self, key: &CStr, buffers: Vec<Vec<u8>>) -> Result<()> {
        let mut entry = TRITONCACHE_CacheEntry {
            buffers: buffers
                .iter()
                .map(|b| Buffer {
                    base: b.as_ptr().cast_mut().cast(),
                    byte_size: b.len(),
                })
                .collect(),
        };
        let mut allocator = TRITONCACHE_Allocator::Insert(buffers);
        // SAFETY: the cache handle Initialize returned, a NUL-terminated key, and an entry
        // and allocator that outlive the call.
        result(unsafe { (self.insert)(self.cache, key.as_ptr(), &mut entry, &mut allocator) })
    }

    /// The buffers stored under `key`, copied out during the call; `None` when the plugin
    /// answers NOT_FOUND (a miss).
    pub fn lookup(&self, key: &CStr) -> Result<Option<Vec<Vec<u8>>>> {
        let mut entry = TRITONCACHE_CacheEntry::default();
        let mut allocator = TRITONCACHE_Allocator::Lookup(None);
        // SAFETY: as for `insert`.
        let status =
            result(unsafe { (self.lookup)(self.cache, key.as_ptr(), &mut entry, &mut allocator) });
        match status {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
            Ok(()) => {}
        }
        match allocator {
            TRITONCACHE_Allocator::Lookup(Some(copied)) => Ok(Some(copied)),
            // Without the copy callback the entry's buffers may already be gone (Triton
            // then answers with no outputs): treat it as the plugin's error.
            _ => Err(Error::internal(format!(
                "cache library '{}' answered a lookup without calling TRITONCACHE_Copy",
                self.path.display()
            ))),
        }
    }
}

impl Drop for CacheLibrary {
    fn drop(&mut self) {
        tracing::debug!("unloading cache '{}'", self.path.display());
        // SAFETY: the handle Initialize returned, finalized once.
        if let Err(e) = result(unsafe { (self.finalize)(self.cache) }) {
            tracing::error!("failed finalizing cache: {}", e.message());
        }
    }
}
