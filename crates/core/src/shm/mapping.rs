//! A read-write `mmap` of part of a POSIX shared-memory object. One of the two modules
//! that touch raw memory (the other is [`super::cuda`], for the CUDA driver): every access
//! goes through a bounds-checked slice or copy.
#![allow(unsafe_code)]

use std::ffi::CString;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// A mapped window `[offset, offset + len)` of a shared-memory object. The mapping starts at
/// the page-aligned offset below `offset` (so any offset works) and is unmapped on drop.
#[derive(Debug)]
pub(super) struct Mapping {
    base: *mut libc::c_void,
    mapped_len: usize,
    /// Distance from the page-aligned mapping start to the window start.
    delta: usize,
    len: usize,
    /// Held while `write_at` copies, so two requests' output writes into this region
    /// never interleave, even when a client gave them overlapping windows.
    writes: Mutex<()>,
}

// SAFETY: the mapping is plain memory owned by this value until drop; concurrent access
// goes through `&self`/`&mut self` slices whose bounds are checked, and the OS keeps the
// pages valid for the life of the mapping.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`. Shared references hand out read slices, and `write_at` copies
// through the raw pointer under `writes`, so writes are serialized with each other. Reads
// are not ordered against writes, nor against the client process, which can write this
// memory at any time: the protocol makes a client that lets an input window overlap an
// in-flight output window responsible for what it reads back. The bytes may then be torn,
// but every access stays within the live mapping.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes at `offset` of the shared-memory object named `key`.
    pub fn open(key: &str, offset: usize, len: usize) -> Result<Self> {
        let c_key = CString::new(key)
            .map_err(|_| Error::invalid_arg(format!("invalid shared memory key '{key}'")))?;
        // SAFETY: `c_key` is a valid NUL-terminated string; the returned fd is checked.
        let fd = unsafe { libc::shm_open(c_key.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(Error::invalid_arg(format!(
                "Unable to open shared memory region: '{key}'"
            )));
        }
        let result = Self::map_fd(fd, key, offset, len);
        // SAFETY: `fd` is an open descriptor we own; the mapping (if any) stays valid after
        // the descriptor is closed.
        unsafe { libc::close(fd) };
        result
    }

    fn map_fd(fd: libc::c_int, key: &str, offset: usize, len: usize) -> Result<Self> {
        // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is a valid out-pointer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(Error::invalid_arg(format!(
                "Unable to read the size of shared memory region: '{key}'"
            )));
        }
        let object_size = usize::try_from(st.st_size).unwrap_or(0);
        let end = offset.saturating_add(len);
        if end > object_size {
            return Err(Error::invalid_arg(format!(
                "offset {offset} + byte_size {len} exceeds the size of shared memory object '{key}' ({object_size} bytes)"
            )));
        }
        if len == 0 {
            return Err(Error::invalid_arg(
                "a shared memory region must have a non-zero byte_size",
            ));
        }
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let aligned = offset - offset % page;
        let delta = offset - aligned;
        let mapped_len = len + delta;
        let file_offset = libc::off_t::try_from(aligned)
            .map_err(|_| Error::invalid_arg(format!("offset {offset} is too large")))?;
        // SAFETY: the requested range lies within the object (checked above), the offset is
        // page-aligned, and the result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                file_offset,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::internal(format!(
                "unable to map shared memory region '{key}': {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Self {
            base,
            mapped_len,
            delta,
            len,
            writes: Mutex::new(()),
        })
    }

    /// The window's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes `[offset, offset + len)` of the window.
    pub fn slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `[delta + offset, delta + end)` lies inside the live mapping (checked
        // above). The memory is shared with the client process, which may write to it; the
        // protocol makes the client responsible for not doing so while a request is in flight.
        Some(unsafe {
            std::slice::from_raw_parts(self.base.cast::<u8>().add(self.delta + offset), len)
        })
    }

    /// Copies `data` into the window at `offset`; false when it does not fit.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> bool {
        let Some(end) = offset.checked_add(data.len()) else {
            return false;
        };
        if end > self.len {
            return false;
        }
        let _serialized = self.writes.lock();
        // SAFETY: the destination range is inside the live mapping (checked above) and does
        // not overlap `data`, which is process-private memory; `writes` is held, so no
        // other write into this mapping runs at the same time.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.base.cast::<u8>().add(self.delta + offset),
                data.len(),
            );
        }
        true
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`mapped_len` describe a mapping this value created and still owns.
        unsafe { libc::munmap(self.base, self.mapped_len) };
    }
}
