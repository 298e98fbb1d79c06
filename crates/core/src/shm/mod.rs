//! The shared-memory extension's region registry (system and CUDA regions). Frontends
//! resolve a tensor's `shared_memory_region/offset/byte_size` here, at the edge, before the
//! request reaches the core: inputs become zero-copy `Bytes` over a system mapping (or a
//! host copy of CUDA memory), outputs become [`OutputTarget`]s the answer is written into. A view holds an `Arc` of its region, so
//! unregistering a region that requests still use defers the unmap until they finish.

mod params;
mod placement;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

pub use nereid_shm::LIBRARY_ENV as CUDA_LIBRARY_ENV;
pub use nereid_shm::MAX_MAPPINGS;
pub use params::{ShmParams, ShmRef};
pub use placement::frontend_query;

use crate::error::{Error, ErrorKind, Result};
use crate::output_query::{MemoryKind, Placement};
use crate::request::OutputTensor;
use nereid_shm::{sigbus, DeviceMemory, Mapping};

/// The core's kind for a memory error.
fn core_kind(kind: nereid_shm::ErrorKind) -> ErrorKind {
    match kind {
        nereid_shm::ErrorKind::InvalidArg => ErrorKind::InvalidArg,
        nereid_shm::ErrorKind::Internal => ErrorKind::Internal,
        nereid_shm::ErrorKind::Unavailable => ErrorKind::Unavailable,
    }
}

impl From<nereid_shm::Error> for Error {
    fn from(e: nereid_shm::Error) -> Self {
        Error::new(core_kind(e.kind()), e.message())
    }
}

/// A registered region: a POSIX shared-memory mapping or a CUDA device allocation.
#[derive(Debug)]
struct Region {
    name: String,
    memory: Memory,
}

#[derive(Debug)]
enum Memory {
    System {
        key: String,
        offset: u64,
        mapping: Mapping,
    },
    Cuda(DeviceMemory),
}

impl Region {
    fn len(&self) -> usize {
        match &self.memory {
            Memory::System { mapping, .. } => mapping.len(),
            Memory::Cuda(device) => device.len(),
        }
    }

    fn kind(&self) -> RegionKind {
        match self.memory {
            Memory::System { .. } => RegionKind::System,
            Memory::Cuda(_) => RegionKind::Cuda,
        }
    }
}

/// The two kinds of region; each has its own status and unregister calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionKind {
    /// POSIX shared memory.
    System,
    /// CUDA device memory shared through an IPC handle.
    Cuda,
}

impl RegionKind {
    fn label(self) -> &'static str {
        match self {
            RegionKind::System => "system",
            RegionKind::Cuda => "CUDA",
        }
    }

    /// Triton's error for a register call without a region name (both frontends).
    pub fn name_required(self) -> Error {
        let kind = match self {
            RegionKind::System => "system",
            RegionKind::Cuda => "cuda",
        };
        Error::invalid_arg(format!(
            "'region name' is necessary to register {kind} shared memory region"
        ))
    }
}

/// What a status call reports for one system region.
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

/// What a status call reports for one CUDA region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRegionStatus {
    /// Region name.
    pub name: String,
    /// The GPU holding the allocation.
    pub device_id: u32,
    /// Size.
    pub byte_size: u64,
}

/// Whether and how much clients may register: each system region holds a mapping (one of
/// the process's `vm.max_map_count`) and a descriptor, and a CUDA region holds device
/// memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmLimits {
    /// Clients may register and unregister regions at all (`--allow-client-shm`). Off by
    /// default, as in Triton since `--allow-client-shm` exists: any client that reaches
    /// the port could otherwise make the server map another process's shared memory and
    /// read or write it.
    pub allow_clients: bool,
    /// Registered regions, system and CUDA together (`--shm-max-regions`).
    pub max_regions: usize,
    /// Their total byte size (`--shm-max-total-bytes`).
    pub max_total_bytes: u64,
}

impl Default for ShmLimits {
    fn default() -> Self {
        Self {
            allow_clients: false,
            max_regions: 1024,
            max_total_bytes: 64 << 30,
        }
    }
}

/// All registered regions, system and CUDA, in one name space (as in Triton).
#[derive(Debug, Default)]
pub struct ShmRegistry {
    // Held only to look up, insert or remove a region; never across I/O on a mapping.
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
    limits: ShmLimits,
    // Registered system regions, read without the lock on every request.
    system_regions: std::sync::atomic::AtomicUsize,
}

/// Where a request's inputs lie, kept while it runs, to fail it if a system region under
/// one of them was truncated meanwhile (its lost pages then read as zeros).
#[derive(Debug)]
pub struct InputWatch {
    repairs_before: u64,
    windows: Vec<(usize, usize)>,
}

impl InputWatch {
    /// An error when a page under one of the inputs was lost while the request ran.
    pub fn verify(&self) -> Result<()> {
        if sigbus::repairs() == self.repairs_before {
            return Ok(());
        }
        if self
            .windows
            .iter()
            .any(|&(start, len)| sigbus::damaged_within(start, len))
        {
            return Err(Error::invalid_arg(
                "a shared memory region holding an input was truncated while the request was using it; unregister it and register it again",
            ));
        }
        Ok(())
    }
}

/// `key` must be a plain POSIX shared-memory name: leading `/`s (which `shm_open`
/// skips) and one path component (no traversal into the file system), not starting with
/// the prefix of the python backend's own regions. Triton's words for what it checks
/// (all slashes, the reserved prefix); Nereid's reason added for the rest.
fn validate_key(name: &str, key: &str) -> Result<()> {
    let bare = key.trim_start_matches('/');
    let invalid =
        format!("cannot register shared memory region '{name}' - invalid shm key '{key}'");
    if bare.is_empty() {
        return Err(Error::invalid_arg(invalid));
    }
    if bare.starts_with(RESERVED_KEY_PREFIX) {
        return Err(Error::invalid_arg(format!(
            "cannot register shared memory region '{name}' with key '{key}' as the key contains the reserved prefix '{RESERVED_KEY_PREFIX}'"
        )));
    }
    let why = if bare.contains('/') {
        Some("it must not contain '/' after the leading ones")
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
        Some(why) => Err(Error::invalid_arg(format!("{invalid}: {why}"))),
        None => Ok(()),
    }
}

/// The start of the keys Triton's python backend gives its own shared memory; a client
/// may not register them (Triton's `kTritonSharedMemoryRegionPrefix`).
const RESERVED_KEY_PREFIX: &str = "triton_python_backend_shm_region_";

/// Triton's answer (UNSUPPORTED) to a register or unregister call while clients may not
/// use shared memory.
pub const CLIENT_SHM_DISABLED: &str =
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

fn too_large(name: &str) -> Error {
    Error::invalid_arg(format!(
        "offset or byte_size of region '{name}' is too large"
    ))
}

impl ShmRegistry {
    /// An empty registry that refuses registrations beyond `limits`.
    pub fn with_limits(limits: ShmLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Triton's refusal when clients may not register or unregister regions; frontends
    /// call it before their own checks of a register call, as Triton does, so a disabled
    /// server answers the same whatever the request holds.
    pub fn client_access(&self) -> Result<()> {
        if self.limits.allow_clients {
            Ok(())
        } else {
            Err(Error::unsupported(CLIENT_SHM_DISABLED))
        }
    }

    /// Starts watching `inputs` for truncation while their request runs; `None` (nothing
    /// to watch, no cost) when no system region is registered.
    pub fn watch_inputs(&self, inputs: &[crate::request::InputTensor]) -> Option<InputWatch> {
        if self
            .system_regions
            .load(std::sync::atomic::Ordering::Acquire)
            == 0
        {
            return None;
        }
        Some(InputWatch {
            repairs_before: sigbus::repairs(),
            windows: inputs
                .iter()
                .map(|i| (i.data.as_ptr() as usize, i.data.len()))
                .collect(),
        })
    }

    /// Keeps the count of system regions in step with the map.
    fn count_system_regions(&self, regions: &BTreeMap<String, Arc<Region>>) {
        let count = regions
            .values()
            .filter(|r| r.kind() == RegionKind::System)
            .count();
        self.system_regions
            .store(count, std::sync::atomic::Ordering::Release);
    }

    /// Refuses a new region of `byte_size` bytes that would pass a limit.
    fn check_room(
        &self,
        regions: &BTreeMap<String, Arc<Region>>,
        name: &str,
        byte_size: u64,
    ) -> Result<()> {
        if regions.contains_key(name) {
            return Err(already_registered(name));
        }
        if regions.len() >= self.limits.max_regions {
            return Err(Error::invalid_arg(format!(
                "failed to register shared memory region '{name}': {} regions are registered, the most this server allows (--shm-max-regions); unregister some first",
                regions.len()
            )));
        }
        let total: u64 = regions.values().map(|r| r.len() as u64).sum();
        if total.saturating_add(byte_size) > self.limits.max_total_bytes {
            return Err(Error::invalid_arg(format!(
                "failed to register shared memory region '{name}': {byte_size} more bytes would pass the {} bytes all regions may take together (--shm-max-total-bytes; {total} registered)",
                self.limits.max_total_bytes
            )));
        }
        Ok(())
    }

    fn insert(&self, region: Region) -> Result<()> {
        // Checked again under the same lock as the insert: registrations may race.
        let mut regions = self.regions.lock();
        self.check_room(&regions, &region.name, region.len() as u64)?;
        regions.insert(region.name.clone(), Arc::new(region));
        self.count_system_regions(&regions);
        Ok(())
    }

    /// Opens and maps `byte_size` bytes at `offset` of the object `key` as region `name`.
    /// Any offset works (the mapping starts at the page boundary below it).
    pub fn register_system(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> Result<()> {
        self.client_access()?;
        validate_key(name, key)?;
        self.check_room(&self.regions.lock(), name, byte_size)?;
        let mapping = Mapping::open(
            name,
            key,
            usize::try_from(offset).map_err(|_| too_large(name))?,
            usize::try_from(byte_size).map_err(|_| too_large(name))?,
        )?;
        self.insert(Region {
            name: name.to_string(),
            memory: Memory::System {
                key: key.to_string(),
                offset,
                mapping,
            },
        })
    }

    /// Opens another process's CUDA allocation from its 64-byte IPC `handle` on
    /// `device_id` as region `name`. Fails clearly where CUDA is not available.
    pub fn register_cuda(
        &self,
        name: &str,
        handle: &[u8],
        device_id: u32,
        byte_size: u64,
    ) -> Result<()> {
        self.client_access()?;
        check_handle(name, handle)?;
        self.check_room(&self.regions.lock(), name, byte_size)?;
        let len = usize::try_from(byte_size).map_err(|_| too_large(name))?;
        let device = DeviceMemory::open(handle, device_id, len).map_err(|e| {
            Error::new(
                core_kind(e.kind()),
                format!(
                    "failed to register CUDA shared memory region '{name}': {}",
                    e.message()
                ),
            )
        })?;
        self.insert(Region {
            name: name.to_string(),
            memory: Memory::Cuda(device),
        })
    }

    /// The regions of `kind` named `name` (all when `None`), or Triton's errors for an
    /// unknown name or a region of the other kind.
    fn of_kind(&self, kind: RegionKind, name: Option<&str>) -> Result<Vec<Arc<Region>>> {
        let regions = self.regions.lock();
        let Some(name) = name else {
            return Ok(regions
                .values()
                .filter(|r| r.kind() == kind)
                .cloned()
                .collect());
        };
        match regions.get(name) {
            Some(r) if r.kind() == kind => Ok(vec![r.clone()]),
            Some(r) => Err(Error::invalid_arg(format!(
                "The region named '{name}' is registered as {} shared memory, not {} shared memory",
                r.kind().label(),
                kind.label()
            ))),
            None => Err(Error::not_found(format!(
                "Unable to find {} shared memory region: '{name}'",
                kind.label()
            ))),
        }
    }

    /// Status of one system region, or of all when `name` is `None`.
    pub fn system_status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>> {
        let regions = self.of_kind(RegionKind::System, name)?;
        Ok(regions
            .iter()
            .filter_map(|r| match &r.memory {
                Memory::System { key, offset, .. } => Some(RegionStatus {
                    name: r.name.clone(),
                    key: key.clone(),
                    offset: *offset,
                    byte_size: r.len() as u64,
                }),
                Memory::Cuda(_) => None,
            })
            .collect())
    }

    /// Status of one CUDA region, or of all when `name` is `None`.
    pub fn cuda_status(&self, name: Option<&str>) -> Result<Vec<CudaRegionStatus>> {
        let regions = self.of_kind(RegionKind::Cuda, name)?;
        Ok(regions
            .iter()
            .filter_map(|r| match &r.memory {
                Memory::Cuda(device) => Some(CudaRegionStatus {
                    name: r.name.clone(),
                    device_id: device.device(),
                    byte_size: r.len() as u64,
                }),
                Memory::System { .. } => None,
            })
            .collect())
    }

    /// Unregisters one region of `kind` (unknown names, and regions of the other kind, are
    /// left alone without an error, as in Triton) or all regions of `kind`. The memory is
    /// released when the last in-flight request using it is done. Refused while clients
    /// may not use shared memory.
    pub fn unregister(&self, kind: RegionKind, name: Option<&str>) -> Result<()> {
        self.client_access()?;
        let mut regions = self.regions.lock();
        match name {
            Some(name) => {
                if regions.get(name).is_some_and(|r| r.kind() == kind) {
                    regions.remove(name);
                }
            }
            None => regions.retain(|_, r| r.kind() != kind),
        }
        self.count_system_regions(&regions);
        Ok(())
    }

    fn region(&self, name: &str) -> Result<Arc<Region>> {
        self.regions.lock().get(name).cloned().ok_or_else(|| {
            Error::not_found(format!("Unable to find shared memory region: '{name}'"))
        })
    }

    /// Checks a tensor's window against its region.
    fn window(&self, shm: &ShmRef) -> Result<(Arc<Region>, usize, usize)> {
        let region = self.region(&shm.region)?;
        let size = region.len() as u64;
        if shm.offset >= size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset for shared memory region: '{}'",
                shm.region
            )));
        }
        let Some(end) = shm.offset.checked_add(shm.byte_size) else {
            return Err(Error::invalid_arg(format!(
                "Integer overflow detected: byte_size ({}) + offset ({}) exceeds maximum value ({}) for region '{}'",
                shm.byte_size,
                shm.offset,
                u64::MAX,
                shm.region
            )));
        };
        if end > size {
            return Err(Error::invalid_arg(format!(
                "Invalid offset + byte size for shared memory region: '{}'",
                shm.region
            )));
        }
        usable(&region)?;
        Ok((region, shm.offset as usize, shm.byte_size as usize))
    }

    /// An input tensor's bytes: read in place from a system region (no copy), copied from
    /// the device for a CUDA region.
    pub fn input(&self, shm: &ShmRef) -> Result<Bytes> {
        match self.input_data(shm)? {
            (bytes, None) => Ok(bytes),
            (_, Some(span)) => span.read(),
        }
    }

    /// Where an input tensor's bytes are: read in place from a system region (no copy),
    /// or left in a CUDA region as a [`DeviceSpan`] (with no bytes) until the model that
    /// gets the request reads them on its GPU or has them copied to the host.
    pub fn input_data(&self, shm: &ShmRef) -> Result<(Bytes, Option<DeviceSpan>)> {
        let (region, offset, len) = self.window(shm)?;
        Ok(tensor_data(region, offset, len))
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

/// A tensor's bytes that are in `[offset, offset + len)` of `region` (checked): the
/// region's own bytes for a system region (no copy), a [`DeviceSpan`] and no bytes for a
/// CUDA region.
fn tensor_data(region: Arc<Region>, offset: usize, len: usize) -> (Bytes, Option<DeviceSpan>) {
    match &region.memory {
        Memory::Cuda(_) => (
            Bytes::new(),
            Some(DeviceSpan {
                region,
                offset,
                len,
            }),
        ),
        Memory::System { .. } => (
            Bytes::from_owner(RegionSlice {
                region,
                offset,
                len,
            }),
            None,
        ),
    }
}

/// Triton's 400 for a region whose object no longer backs it, instead of the SIGBUS that
/// touching it would raise.
fn usable(region: &Region) -> Result<()> {
    let Memory::System { key, mapping, .. } = &region.memory else {
        return Ok(());
    };
    match mapping.unusable() {
        None => Ok(()),
        Some(why) => Err(Error::invalid_arg(format!(
            "shared memory region '{}' is no longer usable: {why} (object '{key}'); unregister it and register it again",
            region.name
        ))),
    }
}

fn already_registered(name: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("shared memory region '{name}' already in manager"),
    )
}

/// A window of a system region that keeps the region mapped while it lives.
struct RegionSlice {
    region: Arc<Region>,
    offset: usize,
    len: usize,
}

impl AsRef<[u8]> for RegionSlice {
    fn as_ref(&self) -> &[u8] {
        match &self.region.memory {
            Memory::System { mapping, .. } => mapping
                .slice(self.offset, self.len)
                .expect("the window was checked against the region when it was made"),
            Memory::Cuda(_) => unreachable!("CUDA inputs are copied to the host, not sliced"),
        }
    }
}

/// A window of a CUDA region holding an input tensor, which keeps the region open while it
/// lives: a backend on the region's GPU reads it there; everything else gets a host copy
/// ([`Self::read`]).
#[derive(Clone)]
pub struct DeviceSpan {
    region: Arc<Region>,
    offset: usize,
    len: usize,
}

impl DeviceSpan {
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The GPU it is on and the device address of its first byte.
    pub fn location(&self) -> Option<(u32, u64)> {
        match &self.region.memory {
            Memory::Cuda(device) => Some((device.device(), device.address(self.offset)?)),
            Memory::System { .. } => None,
        }
    }

    /// Copies its bytes to host memory.
    pub fn read(&self) -> Result<Bytes> {
        match &self.region.memory {
            Memory::Cuda(device) => Ok(Bytes::from(device.read(self.offset, self.len)?)),
            Memory::System { mapping, .. } => mapping
                .slice(self.offset, self.len)
                .map(Bytes::copy_from_slice)
                .ok_or_else(|| Error::internal("shared memory window outside its region")),
        }
    }
}

impl std::fmt::Debug for DeviceSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceSpan({}, {} bytes at {})",
            self.region.name, self.len, self.offset
        )
    }
}

impl PartialEq for DeviceSpan {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.region, &other.region)
            && (self.offset, self.len) == (other.offset, other.len)
    }
}

/// A requested output's place in a region.
#[derive(Debug, Clone)]
pub struct OutputTarget {
    region: Arc<Region>,
    offset: usize,
    len: usize,
}

impl OutputTarget {
    /// The memory the window is in (a backend that asks is told, see
    /// [`crate::output_query`]).
    pub fn placement(&self) -> Placement {
        match &self.region.memory {
            Memory::System { .. } => Placement::CPU,
            Memory::Cuda(device) => Placement {
                kind: MemoryKind::Gpu,
                id: i64::from(device.device()),
            },
        }
    }

    /// The window's size in bytes.
    pub fn window_size(&self) -> usize {
        self.len
    }

    /// Where a backend may write the output's `len` bytes itself, as Triton's frontends
    /// hand a backend the output's region as its buffer: the window's placement and the
    /// address of its first byte (a host pointer in this process, or a device address on
    /// the region's GPU); `None` when `len` bytes do not fit.
    pub fn lend(&self, len: usize) -> Option<(Placement, u64)> {
        if len > self.len {
            return None;
        }
        let address = match &self.region.memory {
            Memory::System { mapping, .. } => mapping.address(self.offset, len)? as u64,
            Memory::Cuda(device) => device.address(self.offset)?,
        };
        Some((self.placement(), address))
    }

    /// The output's first `len` bytes after a backend wrote them into the window itself
    /// ([`Self::lend`]), as an [`OutputTensor`] holds them: the region's own bytes of a
    /// system region, a [`DeviceSpan`] of a CUDA one. [`Self::write`] then copies nothing.
    pub fn written(&self, len: usize) -> (Bytes, Option<DeviceSpan>) {
        tensor_data(self.region.clone(), self.offset, len.min(self.len))
    }

    /// Writes `output` into the window (nothing to copy when its backend wrote it there,
    /// see [`Self::written`]), or says the window is too small.
    pub fn write(&self, output: &OutputTensor) -> Result<()> {
        if self.holds(output) {
            // A truncation under the backend's writes gave it zero pages.
            return usable(&self.region);
        }
        match &output.device {
            Some(span) => self.copy_in(&output.name, &span.read()?),
            None => self.copy_in(&output.name, &output.data),
        }
    }

    /// Whether `output`'s bytes are the start of this very window.
    fn holds(&self, output: &OutputTensor) -> bool {
        match (&output.device, &self.region.memory) {
            (Some(span), _) => {
                Arc::ptr_eq(&span.region, &self.region) && span.offset == self.offset
            }
            (None, Memory::System { mapping, .. }) => {
                !output.data.is_empty()
                    && mapping.address(self.offset, output.data.len())
                        == Some(output.data.as_ptr().cast_mut())
            }
            (None, Memory::Cuda(_)) => false,
        }
    }

    /// Copies output `name`'s bytes into the window, or says the window is too small.
    fn copy_in(&self, name: &str, data: &[u8]) -> Result<()> {
        let fits = data.len() <= self.len
            && match &self.region.memory {
                Memory::System { mapping, .. } => mapping.write_at(self.offset, data),
                Memory::Cuda(device) => {
                    device.write(self.offset, data)?;
                    true
                }
            };
        if !fits {
            return Err(Error::invalid_arg(format!(
                "shared memory size specified with the request for output '{name}' ({} bytes) should be at least {} bytes to hold the results",
                self.len,
                data.len()
            )));
        }
        // The object may have shrunk under the copy: then the bytes went to zero pages.
        usable(&self.region)
    }
}

/// A CUDA region whose `raw_handle` is not a base64 `cudaIpcMemHandle_t`, refused in the
/// words Triton uses when it cannot open a handle ("invalid args"), with the reason.
pub fn bad_handle(name: &str) -> Error {
    Error::invalid_arg(format!(
        "failed to register shared memory region '{name}': invalid args ({})",
        nereid_shm::BAD_HANDLE
    ))
}

/// Refuses (see [`bad_handle`]) a `handle` that cannot be a `cudaIpcMemHandle_t`: not
/// its 64 bytes.
pub fn check_handle(name: &str, handle: &[u8]) -> Result<()> {
    if handle.len() != nereid_shm::IPC_HANDLE_SIZE {
        return Err(bad_handle(name));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
