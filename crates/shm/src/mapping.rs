//! A read-write `mmap` of part of a POSIX shared-memory object. One of the modules that
//! touch raw memory (with [`crate::cuda`] for the CUDA driver and [`crate::sigbus`]):
//! every access goes through a bounds-checked slice or copy. The object's descriptor stays
//! open so that each use can check the object still covers the mapping: the client owns
//! the object and may shrink it at any time.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::sigbus::Guarded;

/// A mapped window `[offset, offset + len)` of a shared-memory object. The mapping starts at
/// the page-aligned offset below `offset` (so any offset works) and is unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    base: *mut libc::c_void,
    mapped_len: usize,
    /// Distance from the page-aligned mapping start to the window start.
    delta: usize,
    len: usize,
    /// Held while `write_at` copies, so two requests' output writes into this region
    /// never interleave, even when a client gave them overlapping windows.
    writes: Mutex<()>,
    /// The object, to see whether it still reaches `needs` bytes.
    fd: OwnedFd,
    /// The object size the mapping needs: the window's end.
    needs: u64,
    /// The mapping's entry in the SIGBUS table; removed before the unmap.
    guard: Option<Guarded>,
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
    /// Maps `len` bytes at `offset` of the shared-memory object named `key`, to become
    /// region `name` (named in the errors, as Triton's are).
    pub fn open(name: &str, key: &str, offset: usize, len: usize) -> Result<Self> {
        let c_key = CString::new(key)
            .map_err(|_| Error::invalid_arg(format!("invalid shared memory key '{key}'")))?;
        // SAFETY: `c_key` is a valid NUL-terminated string; the returned fd is checked.
        let fd = unsafe { libc::shm_open(c_key.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(Error::invalid_arg(format!(
                "Unable to open shared memory region: '{key}'"
            )));
        }
        // SAFETY: `fd` is a descriptor shm_open just returned to us; OwnedFd closes it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Self::map_fd(fd, name, key, offset, len)
    }

    fn map_fd(fd: OwnedFd, name: &str, key: &str, offset: usize, len: usize) -> Result<Self> {
        let object_size = usize::try_from(object_size(&fd).ok_or_else(|| {
            Error::invalid_arg(format!(
                "Unable to read the size of shared memory region: '{key}'"
            ))
        })?)
        .unwrap_or(usize::MAX);
        let end = offset.saturating_add(len);
        if end > object_size {
            return Err(Error::invalid_arg(format!(
                "failed to register shared memory region '{name}': invalid args (offset {offset} + byte_size {len} exceeds the size of shared memory object '{key}', {object_size} bytes)"
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
                fd.as_raw_fd(),
                file_offset,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::internal(format!(
                "unable to map shared memory region '{key}': {}",
                std::io::Error::last_os_error()
            )));
        }
        let Some(guard) = Guarded::watch(base as usize, mapped_len) else {
            // SAFETY: `base`/`mapped_len` is the mapping just made; nothing else refers to it.
            unsafe { libc::munmap(base, mapped_len) };
            return Err(Error::unavailable(
                "too many shared memory regions are mapped in this process",
            ));
        };
        Ok(Self {
            base,
            mapped_len,
            delta,
            len,
            writes: Mutex::new(()),
            fd,
            needs: end as u64,
            guard: Some(guard),
        })
    }

    /// Why the mapping can no longer be used, if it cannot: the object shrank below the
    /// window (using it would fault), or it did while the server was reading or writing
    /// it (the lost pages were replaced with zeros by [`crate::sigbus`]).
    pub fn unusable(&self) -> Option<String> {
        if self.guard.as_ref().is_some_and(Guarded::damaged) {
            return Some("its object was truncated while the server was using it".into());
        }
        match object_size(&self.fd) {
            Some(size) if size >= self.needs => None,
            Some(size) => Some(format!(
                "its object is now {size} bytes, smaller than the {} bytes the region was registered with",
                self.needs
            )),
            None => Some("the size of its object cannot be read".into()),
        }
    }

    /// The window's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window holds no bytes (a zero-byte registration).
    pub fn is_empty(&self) -> bool {
        self.len == 0
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

    /// The address of byte `offset` of the window when `len` bytes from there fit in it:
    /// where a backend writes an output itself (Triton hands a backend the output's region
    /// as its buffer). Its writes are outside [`Self::write_at`]'s lock, as the client's
    /// own writes are; a truncation under them is repaired by [`crate::sigbus`].
    pub fn address(&self, offset: usize, len: usize) -> Option<*mut u8> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(self.base.cast::<u8>().wrapping_add(self.delta + offset))
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

/// The current size of the object behind `fd`.
fn object_size(fd: &OwnedFd) -> Option<u64> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    u64::try_from(st.st_size).ok()
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Out of the SIGBUS table first, so a later mapping at this address is not taken
        // for this one.
        drop(self.guard.take());
        // SAFETY: `base`/`mapped_len` describe a mapping this value created and still owns.
        unsafe { libc::munmap(self.base, self.mapped_len) };
    }
}
