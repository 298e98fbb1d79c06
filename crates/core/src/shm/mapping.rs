//! A read-write `mmap` of part of a POSIX shared-memory object. This is the only place in
//! Nereid that touches raw memory: every access goes through a bounds-checked slice.
#![allow(unsafe_code)]

use std::ffi::CString;

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
}

// SAFETY: the mapping is plain memory owned by this value until drop; concurrent access
// goes through `&self`/`&mut self` slices whose bounds are checked, and the OS keeps the
// pages valid for the life of the mapping.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; shared references only hand out reads, writes need exclusive access
// through `write_at`, which callers serialize per output window.
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
        // SAFETY: the destination range is inside the live mapping (checked above) and does
        // not overlap `data`, which is process-private memory.
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
