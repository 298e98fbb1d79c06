//! NVIDIA's management library (`libnvidia-ml.so.1`, shipped with the driver), loaded at
//! run time so the binary builds and runs on machines without a GPU. Only the readings
//! Triton's GPU metrics need are bound.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};

use libloading::Library;

use crate::reading::Reading;

/// Environment variable naming the NVML library to load instead of `libnvidia-ml.so.1`
/// (tests load a double through it).
pub const LIBRARY_ENV: &str = "NEREID_NVML_LIBRARY";

type NvmlReturn = c_int;
type NvmlDevice = *mut c_void;

/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`: room for any device's UUID and its NUL.
const UUID_BUFFER: usize = 96;

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlMemory_v2_t`: `used` leaves out the memory the driver reserves, as `nvidia-smi`
/// and DCGM (Triton's source) count it; version 1's `used` includes it.
#[repr(C)]
#[derive(Default)]
struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlMemory_v2`: the struct's size with its version in the top byte.
const MEMORY_V2: c_uint = std::mem::size_of::<MemoryV2>() as c_uint | (2 << 24);

/// The loaded library's entry points.
pub(crate) struct Nvml {
    // Kept so the function pointers below stay valid.
    _library: Library,
    shutdown: unsafe extern "C" fn() -> NvmlReturn,
    error_string: unsafe extern "C" fn(NvmlReturn) -> *const c_char,
    device_count: unsafe extern "C" fn(*mut c_uint) -> NvmlReturn,
    device_by_index: unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn,
    uuid: unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn,
    utilization: unsafe extern "C" fn(NvmlDevice, *mut Utilization) -> NvmlReturn,
    memory: unsafe extern "C" fn(NvmlDevice, *mut Memory) -> NvmlReturn,
    /// `nvmlDeviceGetMemoryInfo_v2` (drivers from 510 on).
    memory_v2: Option<unsafe extern "C" fn(NvmlDevice, *mut MemoryV2) -> NvmlReturn>,
    power_usage: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn,
    power_limit: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn,
    energy: unsafe extern "C" fn(NvmlDevice, *mut c_ulonglong) -> NvmlReturn,
}

// SAFETY: NVML is thread-safe after nvmlInit (NVML API reference, "Multi-threaded
// usage"); the struct holds only function pointers and the library that owns them.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

/// Looks up `names` in order (versioned symbol first) and returns the first found.
///
/// # Safety
/// `T` must be the function pointer type of the symbol.
unsafe fn symbol<T: Copy>(library: &Library, names: &[&str]) -> Result<T, String> {
    for name in names {
        // SAFETY: the caller guarantees `T` matches the symbol's signature.
        if let Ok(found) = unsafe { library.get::<T>(name.as_bytes()) } {
            return Ok(*found);
        }
    }
    Err(format!("NVML has no '{}'", names[0]))
}

/// A device handle from `nvmlDeviceGetHandleByIndex`, valid until `nvmlShutdown`.
#[derive(Clone, Copy)]
pub(crate) struct Device(NvmlDevice);

// SAFETY: an NVML device handle is an opaque token NVML accepts on any thread.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Nvml {
    /// Loads the library (`NEREID_NVML_LIBRARY` or `libnvidia-ml.so.1`) and initialises it;
    /// the error says why GPU metrics are unavailable.
    pub(crate) fn load() -> Result<Self, String> {
        let path = std::env::var(LIBRARY_ENV).unwrap_or_else(|_| "libnvidia-ml.so.1".into());
        // SAFETY: loading NVML runs its initialisers, which have no preconditions.
        let library = unsafe { Library::new(&path) }.map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: each type below is the documented signature of the named NVML function.
        let nvml = unsafe {
            let init: unsafe extern "C" fn() -> NvmlReturn =
                symbol(&library, &["nvmlInit_v2", "nvmlInit"])?;
            let nvml = Self {
                shutdown: symbol(&library, &["nvmlShutdown"])?,
                error_string: symbol(&library, &["nvmlErrorString"])?,
                device_count: symbol(&library, &["nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"])?,
                device_by_index: symbol(
                    &library,
                    &[
                        "nvmlDeviceGetHandleByIndex_v2",
                        "nvmlDeviceGetHandleByIndex",
                    ],
                )?,
                uuid: symbol(&library, &["nvmlDeviceGetUUID"])?,
                utilization: symbol(&library, &["nvmlDeviceGetUtilizationRates"])?,
                memory: symbol(&library, &["nvmlDeviceGetMemoryInfo"])?,
                memory_v2: symbol(&library, &["nvmlDeviceGetMemoryInfo_v2"]).ok(),
                power_usage: symbol(&library, &["nvmlDeviceGetPowerUsage"])?,
                power_limit: symbol(&library, &["nvmlDeviceGetPowerManagementLimit"])?,
                energy: symbol(&library, &["nvmlDeviceGetTotalEnergyConsumption"])?,
                _library: library,
            };
            // Until init succeeds, dropping `nvml` must not call nvmlShutdown.
            let status = init();
            if status != 0 {
                let why = nvml.message(status);
                std::mem::forget(nvml);
                return Err(format!("nvmlInit failed: {why}"));
            }
            nvml
        };
        Ok(nvml)
    }

    /// NVML's text for a status.
    fn message(&self, status: NvmlReturn) -> String {
        // SAFETY: nvmlErrorString accepts any status and returns a static string or null.
        let text = unsafe { (self.error_string)(status) };
        if text.is_null() {
            return format!("NVML error {status}");
        }
        // SAFETY: non-null strings from nvmlErrorString are static and NUL-terminated.
        let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        format!("{text} (NVML error {status})")
    }

    fn check(&self, status: NvmlReturn) -> Result<(), String> {
        if status == 0 {
            Ok(())
        } else {
            Err(self.message(status))
        }
    }

    /// `value` where `status` is success, else NVML's reason.
    fn answer<T>(&self, status: NvmlReturn, value: T) -> Result<T, String> {
        self.check(status).map(|()| value)
    }

    /// (total, used) bytes, `used` without the driver's reservation where the driver can
    /// say (version 2), else version 1's figure.
    fn read_memory(&self, device: Device) -> Result<(u64, u64), String> {
        if let Some(memory_v2) = self.memory_v2 {
            let mut memory = MemoryV2 {
                version: MEMORY_V2,
                ..MemoryV2::default()
            };
            // SAFETY: `memory` is a valid nvmlMemory_v2_t with its version set.
            if unsafe { memory_v2(device.0, &mut memory) } == 0 {
                return Ok((memory.total, memory.used));
            }
        }
        let mut memory = Memory::default();
        // SAFETY: `memory` is a valid out-pointer; `device` came from `devices`.
        let status = unsafe { (self.memory)(device.0, &mut memory) };
        self.answer(status, (memory.total, memory.used))
    }

    /// Every device NVML sees, in its index order (PCI bus order), with its UUID.
    pub(crate) fn devices(&self) -> Result<Vec<(Device, String)>, String> {
        let mut count: c_uint = 0;
        // SAFETY: `count` is a valid out-pointer.
        self.check(unsafe { (self.device_count)(&mut count) })?;
        let mut devices = Vec::new();
        for index in 0..count {
            let mut handle: NvmlDevice = std::ptr::null_mut();
            // SAFETY: `handle` is a valid out-pointer; `index` is below the count.
            self.check(unsafe { (self.device_by_index)(index, &mut handle) })?;
            let mut buffer = [0 as c_char; UUID_BUFFER];
            // SAFETY: `buffer` has UUID_BUFFER writable bytes, the length passed.
            self.check(unsafe { (self.uuid)(handle, buffer.as_mut_ptr(), UUID_BUFFER as c_uint) })?;
            // NVML NUL-terminates within the length; the last byte stays 0 regardless.
            buffer[UUID_BUFFER - 1] = 0;
            // SAFETY: `buffer` is NUL-terminated (above).
            let uuid = unsafe { CStr::from_ptr(buffer.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            devices.push((Device(handle), uuid));
        }
        Ok(devices)
    }

    /// Reads every field of `device`; a field NVML cannot read is an `Err` with its reason.
    pub(crate) fn read(&self, device: Device) -> Reading {
        let mut utilization = Utilization::default();
        let (mut power, mut limit, mut energy): (c_uint, c_uint, c_ulonglong) = (0, 0, 0);
        // SAFETY: every out-pointer is valid for its type; `device` came from `devices`.
        let [utilization_status, power_status, limit_status, energy_status] = unsafe {
            [
                (self.utilization)(device.0, &mut utilization),
                (self.power_usage)(device.0, &mut power),
                (self.power_limit)(device.0, &mut limit),
                (self.energy)(device.0, &mut energy),
            ]
        };
        Reading {
            utilization: self.answer(utilization_status, f64::from(utilization.gpu) / 100.0),
            memory: self.read_memory(device),
            power_watts: self.answer(power_status, f64::from(power) / 1000.0),
            power_limit_watts: self.answer(limit_status, f64::from(limit) / 1000.0),
            energy_millijoules: self.answer(energy_status, energy),
        }
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: nvmlInit succeeded for this value (load forgets it otherwise).
        let _ = unsafe { (self.shutdown)() };
    }
}
