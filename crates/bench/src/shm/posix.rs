//! A POSIX shared-memory object created by the benchmark: `shm_open` + `ftruncate` +
//! `mmap`, unmapped and `shm_unlink`ed on drop.
//!
//! `unsafe` is allowed in this module only: creating and mapping shared memory has no safe
//! API in `std`, and these few FFI calls are all of it. Every access to the mapping goes
//! through a bounds-checked slice.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;

/// A created, mapped shared-memory object; removed from the system on drop.
#[derive(Debug)]
pub struct ShmObject {
    c_key: CString,
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value until drop; writes need
// `&mut self` and the pages stay valid for the life of the mapping, on any thread.
unsafe impl Send for ShmObject {}

impl ShmObject {
    /// Creates the object `key` (which must not exist yet), sizes it to `len` bytes
    /// (zero-filled) and maps it read-write.
    pub fn create(key: &str, len: usize) -> io::Result<Self> {
        let c_key = CString::new(key).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared memory key contains NUL",
            )
        })?;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared memory object of 0 bytes",
            ));
        }
        let size = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "object too large"))?;
        // SAFETY: `c_key` is a valid NUL-terminated string; the returned fd is checked.
        let fd = unsafe {
            libc::shm_open(
                c_key.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mapped = Self::size_and_map(fd, size, len);
        // SAFETY: `fd` is an open descriptor we own; a mapping stays valid after close.
        unsafe { libc::close(fd) };
        match mapped {
            Ok(base) => Ok(Self { c_key, base, len }),
            Err(e) => {
                // SAFETY: `c_key` is valid; we created this object just above.
                unsafe { libc::shm_unlink(c_key.as_ptr()) };
                Err(e)
            }
        }
    }

    fn size_and_map(
        fd: libc::c_int,
        size: libc::off_t,
        len: usize,
    ) -> io::Result<*mut libc::c_void> {
        // SAFETY: `fd` is an open shared-memory descriptor.
        if unsafe { libc::ftruncate(fd, size) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh shared read-write mapping of `len` bytes of an object at least
        // that large; the result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(base)
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The whole mapping, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `base` points to `len` mapped read-write bytes that live until drop, and
        // `&mut self` makes this the only reference handed out by this value.
        unsafe { std::slice::from_raw_parts_mut(self.base.cast::<u8>(), self.len) }
    }

    /// The whole mapping.
    #[cfg(test)]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as in `as_mut_slice`; shared access only reads.
        unsafe { std::slice::from_raw_parts(self.base.cast::<u8>(), self.len) }
    }
}

impl Drop for ShmObject {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `create`, unmapped only
        // here; `c_key` names the object we created. Failures leave nothing to do.
        unsafe {
            libc::munmap(self.base, self.len);
            libc::shm_unlink(self.c_key.as_ptr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_write_and_unlink_on_drop() {
        let key = format!("/nereid_bench_test_{}", std::process::id());
        let mut object = ShmObject::create(&key, 4096).expect("create");
        assert_eq!(object.len(), 4096);
        assert!(object.as_slice().iter().all(|&b| b == 0));
        object.as_mut_slice()[..3].copy_from_slice(&[1, 2, 3]);
        assert_eq!(&object.as_slice()[..4], &[1, 2, 3, 0]);
        // A second create of the same key fails: keys are exclusive.
        assert!(ShmObject::create(&key, 4096).is_err());
        drop(object);
        // Gone after drop, so it can be created again.
        drop(ShmObject::create(&key, 16).expect("re-create after unlink"));
    }
}
