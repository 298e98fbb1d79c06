//! The shared-memory extension's region registry. Frontends resolve a tensor's
//! `shared_memory_region/offset/byte_size` here, at the edge, before the request reaches
//! the core: inputs become zero-copy `Bytes` over the mapping, outputs become
//! [`OutputTarget`]s the answer is written into. A view holds an `Arc` of its region, so
//! unregistering a region that requests still use defers the unmap until they finish.

mod mapping;
mod params;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

pub use params::{ShmParams, ShmRef};

use crate::error::{Error, ErrorKind, Result};
use mapping::Mapping;

/// A registered system shared-memory region.
#[derive(Debug)]
pub struct SystemRegion {
    /// Region name chosen by the client.
    pub name: String,
    /// The POSIX shared-memory object's name.
    pub key: String,
    /// Offset of the region in the object.
    pub offset: u64,
    /// Size of the region.
    pub byte_size: u64,
    mapping: Mapping,
}

/// What a status call reports for one region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStatus {
    /// Region name.
    pub name: String,
    /// Object name.
    pub key: String,
    /// Offset in the object.
    pub offset: u64,
    /// Size.
    pub byte_size: u64,
}

/// All registered regions.
#[derive(Debug, Default)]
pub struct ShmRegistry {
    // Held only to look up, insert or remove a region; never across I/O on a mapping.
    system: Mutex<BTreeMap<String, Arc<SystemRegion>>>,
}

/// `key` must be a plain POSIX shared-memory name: an optional leading `/` and one path
/// component (no traversal into the file system).
fn validate_key(key: &str) -> Result<()> {
    let bare = key.strip_prefix('/').unwrap_or(key);
    let why = if bare.is_empty() {
        Some("it is empty")
    } else if bare.contains('/') {
        Some("it must not contain '/' after the leading one")
    } else if bare == "." || bare == ".." {
        Some("'.' and '..' are not object names")
    } else if bare.contains('\0') {
        Some("it contains a NUL byte")
    } else if bare.len() > 255 {
        Some("it is longer than 255 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::invalid_arg(format!(
            "invalid shared memory key '{key}': {why}"
        ))),
        None => Ok(()),
    }
}

impl ShmRegistry {
    /// Opens and maps `byte_size` bytes at `offset` of the object `key` as region `name`.
    /// Any offset works (the mapping starts at the page boundary below it).
    pub fn register_system(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<()> {
        validate_key(key)?;
        if self.system.lock().contains_key(name) {
            return Err(already_registered(name));
        }
        let too_large = || {
            Error::invalid_arg(format!(
                "offset or byte_size of region '{name}' is too large"
            ))
        };
        let mapping = Mapping::open(
            key,
            usize::try_from(offset).map_err(|_| too_large())?,
            usize::try_from(byte_size).map_err(|_| too_large())?,
        )?;
        let region = Arc::new(SystemRegion {
            name: name.to_string(),
            key: key.to_string(),
            offset,
            byte_size,
            mapping,
        });
        let mut regions = self.system.lock();
        if regions.contains_key(name) {
            return Err(already_registered(name));
        }
        regions.insert(name.to_string(), region);
        Ok(())
    }

    /// Status of one region, or of all when `name` is `None`.
    pub fn system_status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>> {
        let regions = self.system.lock();
        let status = |r: &SystemRegion| RegionStatus {
            name: r.name.clone(),
            key: r.key.clone(),
            offset: r.offset,
            byte_size: r.byte_size,
        };
        match name {
            Some(name) => regions.get(name).map(|r| vec![status(r)]).ok_or_else(|| {
                Error::not_found(format!(
                    "Unable to find system shared memory region: '{name}'"
                ))
            }),
            None => Ok(regions.values().map(|r| status(r)).collect()),
        }
    }

    /// Unregisters one region (unknown names are fine, as in Triton) or all of them. The
    /// mapping goes away when the last in-flight request using it is done.
    pub fn unregister_system(&self, name: Option<&str>) {
        let mut regions = self.system.lock();
        match name {
            Some(name) => {
                regions.remove(name);
            }
            None => regions.clear(),
        }
    }

    fn region(&self, name: &str) -> Result<Arc<SystemRegion>> {
        self.system.lock().get(name).cloned().ok_or_else(|| {
            Error::not_found(format!("Unable to find shared memory region: '{name}'"))
        })
    }

    /// Checks a tensor's window against its region.
    fn window(&self, shm: &ShmRef) -> Result<(Arc<SystemRegion>, usize, usize)> {
        let region = self.region(&shm.region)?;
        let size = region.mapping.len() as u64;
        if shm.offset >= size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset for shared memory region: '{}'",
                shm.region
            )));
        }
        if shm
            .offset
            .checked_add(shm.byte_size)
            .is_none_or(|end| end > size)
        {
            return Err(Error::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{}'",
                shm.region
            )));
        }
        Ok((region, shm.offset as usize, shm.byte_size as usize))
    }

    /// An input tensor's bytes, read in place from the region (no copy).
    pub fn input(&self, shm: &ShmRef) -> Result<Bytes> {
        let (region, offset, len) = self.window(shm)?;
        Ok(Bytes::from_owner(RegionSlice {
            region,
            offset,
            len,
        }))
    }

    /// Where an output is to be written.
    pub fn output(&self, shm: &ShmRef) -> Result<OutputTarget> {
        let (region, offset, len) = self.window(shm)?;
        Ok(OutputTarget {
            region,
            offset,
            len,
        })
    }
}

fn already_registered(name: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("shared memory region '{name}' already in manager"),
    )
}

/// A window of a region that keeps the region mapped while it lives.
struct RegionSlice {
    region: Arc<SystemRegion>,
    offset: usize,
    len: usize,
}

impl AsRef<[u8]> for RegionSlice {
    fn as_ref(&self) -> &[u8] {
        self.region
            .mapping
            .slice(self.offset, self.len)
            .expect("the window was checked against the region when it was made")
    }
}

/// A requested output's place in a region.
#[derive(Debug, Clone)]
pub struct OutputTarget {
    region: Arc<SystemRegion>,
    offset: usize,
    len: usize,
}

impl OutputTarget {
    /// Writes output `name`'s bytes into the window, or says the window is too small.
    pub fn write(&self, name: &str, data: &[u8]) -> Result<()> {
        if data.len() > self.len || !self.region.mapping.write_at(self.offset, data) {
            return Err(Error::invalid_arg(format!(
                "shared memory size specified with the request for output '{name}' ({} bytes) should be at least {} bytes to hold the results",
                self.len,
                data.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
