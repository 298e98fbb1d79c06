//! CUDA shared memory through the CUDA driver API, loaded at run time so the binary builds
//! and runs on machines without CUDA. A registered region is a device allocation of another
//! process opened with `cuIpcOpenMemHandle`; inputs are copied device→host and outputs
//! host→device (Nereid's backends run on the CPU).
//!
//! The library is `libcuda.so.1` (shipped with the NVIDIA driver), or the file named by
//! `NEREID_CUDA_LIBRARY`.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use libloading::Library;

use crate::error::{Error, Result};

/// Size of `cudaIpcMemHandle_t` / `CUipcMemHandle`.
pub const IPC_HANDLE_SIZE: usize = 64;

/// Why a `raw_handle` was refused: not base64, or not [`IPC_HANDLE_SIZE`] bytes.
pub const BAD_HANDLE: &str = "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t";

/// Environment variable naming the CUDA driver library to load instead of `libcuda.so.1`.
pub const LIBRARY_ENV: &str = "NEREID_CUDA_LIBRARY";

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuDevicePtr = u64;

/// `CUipcMemHandle`, passed by value as the driver expects.
#[repr(C)]
#[derive(Clone, Copy)]
struct IpcHandle {
    reserved: [u8; IPC_HANDLE_SIZE],
}

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
const LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

/// The driver entry points Nereid uses.
struct Driver {
    // Kept so the function pointers below stay valid.
    _library: Library,
    get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_uuid: unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    primary_ctx_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(CuContext) -> CuResult,
    ctx_get_current: unsafe extern "C" fn(*mut CuContext) -> CuResult,
    ipc_open: unsafe extern "C" fn(*mut CuDevicePtr, IpcHandle, c_uint) -> CuResult,
    ipc_close: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    address_range: unsafe extern "C" fn(*mut CuDevicePtr, *mut usize, CuDevicePtr) -> CuResult,
    copy_to_host: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    copy_to_device: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
}

/// Looks up `names` in order (versioned symbol first) and returns the first found.
///
/// # Safety
/// `T` must be the function pointer type of the symbol.
unsafe fn symbol<T: Copy>(library: &Library, names: &[&str]) -> std::result::Result<T, String> {
    for name in names {
        // SAFETY: the caller guarantees `T` matches the symbol's signature.
        if let Ok(found) = unsafe { library.get::<T>(name.as_bytes()) } {
            return Ok(*found);
        }
    }
    Err(format!("the CUDA driver has no '{}'", names[0]))
}

impl Driver {
    fn load() -> std::result::Result<Self, String> {
        let path = std::env::var(LIBRARY_ENV).unwrap_or_else(|_| "libcuda.so.1".to_string());
        // SAFETY: loading the CUDA driver runs its initialisers, which have no preconditions.
        let library = unsafe { Library::new(&path) }.map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: each type below is the documented signature of the named driver function.
        let driver = unsafe {
            Self {
                get_error_string: symbol(&library, &["cuGetErrorString"])?,
                device_get_count: symbol(&library, &["cuDeviceGetCount"])?,
                device_get: symbol(&library, &["cuDeviceGet"])?,
                device_uuid: symbol(&library, &["cuDeviceGetUuid_v2", "cuDeviceGetUuid"])?,
                primary_ctx_retain: symbol(&library, &["cuDevicePrimaryCtxRetain"])?,
                primary_ctx_release: symbol(
                    &library,
                    &["cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"],
                )?,
                ctx_set_current: symbol(&library, &["cuCtxSetCurrent"])?,
                ctx_get_current: symbol(&library, &["cuCtxGetCurrent"])?,
                ipc_open: symbol(&library, &["cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"])?,
                ipc_close: symbol(&library, &["cuIpcCloseMemHandle"])?,
                address_range: symbol(
                    &library,
                    &["cuMemGetAddressRange_v2", "cuMemGetAddressRange"],
                )?,
                copy_to_host: symbol(&library, &["cuMemcpyDtoH_v2", "cuMemcpyDtoH"])?,
                copy_to_device: symbol(&library, &["cuMemcpyHtoD_v2", "cuMemcpyHtoD"])?,
                mem_alloc: symbol(&library, &["cuMemAlloc_v2", "cuMemAlloc"])?,
                mem_free: symbol(&library, &["cuMemFree_v2", "cuMemFree"])?,
                _library: library,
            }
        };
        // SAFETY: cuInit has no preconditions.
        let init: unsafe extern "C" fn(c_uint) -> CuResult =
            unsafe { symbol(&driver._library, &["cuInit"])? };
        // SAFETY: see above.
        driver
            .check(unsafe { init(0) })
            .map_err(|e| format!("cuInit failed: {e}"))?;
        Ok(driver)
    }

    /// Turns a driver status into a message.
    fn check(&self, status: CuResult) -> std::result::Result<(), String> {
        if status == 0 {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `text` is a valid out-pointer; the driver returns a static string or null.
        let known = unsafe { (self.get_error_string)(status, &mut text) } == 0 && !text.is_null();
        Err(if known {
            // SAFETY: non-null strings from cuGetErrorString are static and NUL-terminated.
            let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
            format!("{text} (CUDA error {status})")
        } else {
            format!("CUDA error {status}")
        })
    }

    /// Copies `len` bytes at device address `address` to host memory, in the context
    /// current on this thread.
    ///
    /// # Safety
    /// `[address, address + len)` must be device memory that stays allocated for the call.
    unsafe fn copy_out(&self, address: u64, len: usize) -> Result<Vec<u8>> {
        let mut host = vec![0u8; len];
        // SAFETY: `host` has `len` writable bytes; the device range is the caller's
        // contract.
        self.check(unsafe { (self.copy_to_host)(host.as_mut_ptr().cast(), address, len) })
            .map_err(|e| Error::internal(format!("CUDA device-to-host copy failed: {e}")))?;
        Ok(host)
    }

    /// Copies `data` to device address `address`, in the context current on this thread.
    ///
    /// # Safety
    /// `[address, address + data.len())` must be device memory that stays allocated for
    /// the call and that nothing else uses meanwhile.
    unsafe fn copy_in(&self, address: u64, data: &[u8]) -> Result<()> {
        // SAFETY: `data` is readable for its length; the device range is the caller's
        // contract.
        self.check(unsafe { (self.copy_to_device)(address, data.as_ptr().cast(), data.len()) })
            .map_err(|e| Error::internal(format!("CUDA host-to-device copy failed: {e}")))
    }

    /// Remembers the context current on this thread, made current again when the guard
    /// drops: calls that run on a caller's thread (an in-process caller's, a backend's)
    /// leave its CUDA context as they found it, as Triton's CUDA memory manager restores
    /// the caller's device.
    fn keep_current(&'static self) -> KeepCurrent {
        let mut previous: CuContext = std::ptr::null_mut();
        // SAFETY: `previous` is a valid out-pointer (left null if the call fails).
        let _ = unsafe { (self.ctx_get_current)(&mut previous) };
        KeepCurrent {
            driver: self,
            previous: previous as usize,
        }
    }

    /// Retains `device`'s primary context (released by [`DeviceMemory`]'s drop) and makes
    /// it current on this thread.
    fn retain_device(&'static self, device: u32) -> std::result::Result<Retained, String> {
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid out-pointer.
        self.check(unsafe { (self.device_get_count)(&mut count) })?;
        let ordinal = c_int::try_from(device)
            .ok()
            .filter(|d| *d < count)
            .ok_or_else(|| format!("device {device} does not exist (this server sees {count})"))?;
        let mut handle: CuDevice = 0;
        let mut context: CuContext = std::ptr::null_mut();
        // SAFETY: out-pointers are valid; `ordinal` is in range.
        unsafe {
            self.check((self.device_get)(&mut handle, ordinal))?;
            self.check((self.primary_ctx_retain)(&mut context, handle))?;
        }
        let retained = Retained {
            driver: self,
            handle,
            context: context as usize,
        };
        retained.make_current()?;
        Ok(retained)
    }
}

/// The driver, loaded on first use; the error says why CUDA cannot be used.
fn driver() -> Result<&'static Driver> {
    static DRIVER: OnceLock<std::result::Result<Driver, String>> = OnceLock::new();
    DRIVER
        .get_or_init(Driver::load)
        .as_ref()
        .map_err(|why| Error::invalid_arg(format!("CUDA is not available on this server ({why})")))
}

/// Copies `len` bytes at the device address `address` on `device` — memory of this
/// process, such as an in-process caller's GPU input buffer — into host memory. The
/// error says why when CUDA cannot be used or the copy fails.
///
/// # Safety
/// `[address, address + len)` must be device memory on `device` that stays allocated for
/// the call; the driver reports addresses it does not know, but not a range that runs
/// past the end of an allocation into another one.
pub unsafe fn copy_device_to_host(device: u32, address: u64, len: usize) -> Result<Vec<u8>> {
    // SAFETY: the device range is the caller's contract.
    on_device(device, |driver| unsafe { driver.copy_out(address, len) })
}

/// Copies `data` to the device address `address` on `device` — memory of this process,
/// such as the GPU buffer an in-process caller's allocator gave for an output. The error
/// says why when CUDA cannot be used or the copy fails.
///
/// # Safety
/// `[address, address + data.len())` must be device memory on `device` that stays
/// allocated for the call and that nothing else uses meanwhile.
pub unsafe fn copy_host_to_device(device: u32, address: u64, data: &[u8]) -> Result<()> {
    // SAFETY: the device range is the caller's contract.
    on_device(device, |driver| unsafe { driver.copy_in(address, data) })
}

/// Runs `body` with `device`'s primary context current on this thread, then gives the
/// caller's context back (see [`Driver::keep_current`]).
fn on_device<T>(device: u32, body: impl FnOnce(&'static Driver) -> Result<T>) -> Result<T> {
    let driver = driver()?;
    let _caller = driver.keep_current();
    // Dropped before `_caller`, which then restores the caller's context.
    let _context = driver.retain_device(device).map_err(Error::invalid_arg)?;
    body(driver)
}

/// Whether the CUDA driver can be used here; the error says why not.
pub fn available() -> Result<()> {
    driver().map(|_| ())
}

/// How many GPUs the CUDA driver shows this process (`CUDA_VISIBLE_DEVICES` applied by
/// the driver), where `KIND_GPU` instances may be placed; 0 without a usable driver.
pub fn device_count() -> usize {
    let Ok(driver) = driver() else {
        return 0;
    };
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out-pointer and the driver is initialized.
    match driver.check(unsafe { (driver.device_get_count)(&mut count) }) {
        Ok(()) => usize::try_from(count).unwrap_or(0),
        Err(why) => {
            tracing::warn!("counting GPUs failed, none used: {why}");
            0
        }
    }
}

/// Device memory this process allocated (`cuMemAlloc`) on one GPU, freed (and the
/// device's primary context released) on drop: the block a CUDA memory pool hands out
/// pieces of.
#[derive(Debug)]
pub(crate) struct OwnedDeviceMemory {
    address: CuDevicePtr,
    // Dropped after `Drop::drop` has freed the memory.
    context: Retained,
}

impl OwnedDeviceMemory {
    /// `len` bytes of device memory on `device`; the error says why not (no driver, no
    /// such device, out of memory).
    pub(crate) fn allocate(device: u32, len: usize) -> Result<Self> {
        let driver = driver()?;
        let _caller = driver.keep_current();
        let context = driver.retain_device(device).map_err(Error::invalid_arg)?;
        let mut address: CuDevicePtr = 0;
        // SAFETY: `address` is a valid out-pointer; the device's context is current.
        driver
            .check(unsafe { (driver.mem_alloc)(&mut address, len.max(1)) })
            .map_err(Error::internal)?;
        Ok(Self { address, context })
    }

    /// The device address of the memory's first byte.
    pub(crate) fn address(&self) -> u64 {
        self.address
    }
}

impl Drop for OwnedDeviceMemory {
    fn drop(&mut self) {
        if self.context.make_current().is_ok() {
            // SAFETY: `address` came from cuMemAlloc and is freed exactly once.
            let _ = unsafe { (self.context.driver.mem_free)(self.address) };
        }
    }
}

/// GPU `device`'s UUID as NVML and `nvidia-smi` spell it (`GPU-` and 8-4-4-4-12 hex
/// digits), which Triton labels a GPU instance's metrics with; `None` without a usable
/// driver or such a device.
pub fn device_uuid(device: u32) -> Option<String> {
    let driver = driver().ok()?;
    let ordinal = c_int::try_from(device).ok()?;
    let mut handle: CuDevice = 0;
    let mut bytes = [0u8; 16];
    // SAFETY: valid out-pointers; the driver checks the ordinal and the handle.
    unsafe {
        driver
            .check((driver.device_get)(&mut handle, ordinal))
            .ok()?;
        driver
            .check((driver.device_uuid)(&mut bytes, handle))
            .ok()?;
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

/// A device allocation of another process, opened from its IPC handle; closed (and its
/// device's primary context released) on drop.
#[derive(Debug)]
pub struct DeviceMemory {
    device: u32,
    ptr: CuDevicePtr,
    len: usize,
    // Dropped after `Drop::drop` has closed the handle.
    context: Retained,
}

impl DeviceMemory {
    /// Opens `handle` on `device` and checks that `len` bytes are available from the
    /// allocation's start. Errors are the reason only; the caller names the region.
    pub fn open(handle: &[u8], device: u32, len: usize) -> Result<Self> {
        let driver = driver()?;
        let handle: [u8; IPC_HANDLE_SIZE] = handle
            .try_into()
            .map_err(|_| Error::invalid_arg(BAD_HANDLE))?;
        let context = driver.retain_device(device).map_err(Error::invalid_arg)?;
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: `ptr` is a valid out-pointer and the handle is passed by value.
        driver
            .check(unsafe {
                (driver.ipc_open)(
                    &mut ptr,
                    IpcHandle { reserved: handle },
                    LAZY_ENABLE_PEER_ACCESS,
                )
            })
            .map_err(|e| Error::invalid_arg(format!("unable to open the CUDA IPC handle: {e}")))?;
        // From here on, dropping `memory` closes the handle and releases the context.
        let memory = Self {
            device,
            ptr,
            len,
            context,
        };
        let (mut base, mut size): (CuDevicePtr, usize) = (0, 0);
        // SAFETY: out-pointers are valid; `ptr` is a live device address.
        driver
            .check(unsafe { (driver.address_range)(&mut base, &mut size, ptr) })
            .map_err(|e| Error::internal(format!("unable to query the CUDA allocation: {e}")))?;
        let available = (base + size as u64).saturating_sub(ptr);
        if len as u64 > available {
            return Err(Error::invalid_arg(format!(
                "byte_size {len} exceeds the CUDA allocation ({available} bytes)"
            )));
        }
        if len == 0 {
            return Err(Error::invalid_arg(
                "a shared memory region must have a non-zero byte_size",
            ));
        }
        Ok(memory)
    }

    /// The region's size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region holds no bytes (a zero-byte registration).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device the allocation lives on.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The device address of byte `offset` of the region, as this process sees it (a
    /// backend on the same GPU may read it directly), or `None` past its end.
    pub fn address(&self, offset: usize) -> Option<u64> {
        (offset <= self.len).then(|| self.ptr + offset as u64)
    }

    fn in_bounds(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Copies `len` bytes at `offset` to host memory.
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        if !self.in_bounds(offset, len) {
            return Err(Error::invalid_arg(
                "read outside the CUDA shared memory region",
            ));
        }
        self.context.make_current().map_err(Error::internal)?;
        // SAFETY: `[ptr + offset, +len)` lies inside the opened allocation (checked
        // against its address range at open and above), which stays open while `self`
        // lives.
        unsafe { self.context.driver.copy_out(self.ptr + offset as u64, len) }
    }

    /// Copies `data` to the device at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        if !self.in_bounds(offset, data.len()) {
            return Err(Error::invalid_arg(
                "write outside the CUDA shared memory region",
            ));
        }
        self.context.make_current().map_err(Error::internal)?;
        // SAFETY: the destination lies inside the opened allocation (checked above); the
        // protocol gives the window to this request's output alone.
        unsafe { self.context.driver.copy_in(self.ptr + offset as u64, data) }
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        if self.context.make_current().is_ok() {
            // SAFETY: `ptr` came from cuIpcOpenMemHandle and is closed exactly once.
            let _ = unsafe { (self.context.driver.ipc_close)(self.ptr) };
        }
    }
}

/// The context a thread had before a call made another current; restored on drop.
struct KeepCurrent {
    driver: &'static Driver,
    /// The context's address (null: none was current).
    previous: usize,
}

impl Drop for KeepCurrent {
    fn drop(&mut self) {
        // SAFETY: the context that was current on this thread, or null (none).
        let _ = unsafe { (self.driver.ctx_set_current)(self.previous as CuContext) };
    }
}

/// A device's retained primary context, released on drop (also when opening a region
/// fails), so each region holds exactly one reference.
struct Retained {
    driver: &'static Driver,
    handle: CuDevice,
    /// The context's address (contexts may be made current on any thread).
    context: usize,
}

impl Retained {
    /// Makes the context current on this thread (copies run on whichever thread asks).
    fn make_current(&self) -> std::result::Result<(), String> {
        // SAFETY: the context is a primary context retained by this value.
        self.driver
            .check(unsafe { (self.driver.ctx_set_current)(self.context as CuContext) })
    }
}

impl std::fmt::Debug for Retained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Retained(device handle {})", self.handle)
    }
}

impl Drop for Retained {
    fn drop(&mut self) {
        // SAFETY: the context of `handle` was retained once for this value.
        let _ = unsafe { (self.driver.primary_ctx_release)(self.handle) };
    }
}
