//! `TRITONSERVER_ServerOptions`: what a program sets before `TRITONSERVER_ServerNew`.
//! Settings Nereid uses are stored; settings that only tune Triton's own machinery (GPU
//! pools, buffer threads) are accepted and ignored exactly where Triton accepts them, so
//! programs written for Triton configure Nereid unchanged. The log settings decide where
//! the server's records go ([`super::logging`]).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::path::PathBuf;
use std::time::Duration;

use nereid_core::log_settings::LogFormat;
use nereid_core::metrics::MetricsConfig;
use nereid_core::rate_limit::ResourceLimit;
use nereid_core::repository::ControlMode;

use super::logging::{self, LogCallbackFn, LogOptions};
use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi;

/// The options object behind `TRITONSERVER_ServerOptions*`, with Triton's defaults
/// (`TritonServerOptions` in core `src/tritonserver.cc`).
pub struct TRITONSERVER_ServerOptions {
    /// `SetServerId`: the name in server metadata.
    pub(crate) server_id: String,
    /// `SetModelRepositoryPath`, in the order given.
    pub(crate) repositories: Vec<PathBuf>,
    /// `SetModelControlMode` (Triton's default is POLL).
    pub(crate) control_mode: ControlMode,
    /// `SetStartupModel`.
    pub(crate) startup_models: Vec<String>,
    /// `SetStrictModelConfig` (Triton's C API default is strict).
    pub(crate) strict_model_config: bool,
    /// `SetStrictReadiness`.
    pub(crate) strict_readiness: bool,
    /// `SetExitOnError`.
    pub(crate) exit_on_error: bool,
    /// `SetExitTimeout`, seconds.
    pub(crate) exit_timeout_secs: u32,
    /// `SetBackendConfig`: backend, setting, value.
    pub(crate) backend_config: Vec<(String, String, String)>,
    /// `SetCacheConfig`: cache name and its JSON configuration (the last one set wins).
    pub(crate) cache: Option<(String, String)>,
    /// `SetCacheDirectory`.
    pub(crate) cache_directory: PathBuf,
    /// `SetResponseCacheByteSize` (deprecated; a local cache of that size).
    pub(crate) response_cache_byte_size: Option<u64>,
    /// `SetBackendDirectory`: where Triton backend libraries are looked up.
    pub(crate) backend_directory: PathBuf,
    /// `SetMetricsConfig`: the latency metrics each model exports.
    pub(crate) metrics_config: MetricsConfig,
    /// `SetMetricsInterval`: how often the CPU gauges are polled.
    pub(crate) metrics_interval: Duration,
    /// `SetCpuMetrics`: whether the CPU gauges are polled and exported.
    pub(crate) cpu_metrics: bool,
    /// `SetGpuMetrics`: whether the GPU gauges are polled (through NVML) and exported.
    pub(crate) gpu_metrics: bool,
    /// `SetRateLimiterMode`: EXEC_COUNT (true) or OFF, Triton's default.
    pub(crate) rate_limit: bool,
    /// `AddRateLimiterResource`s.
    pub(crate) rate_limit_resources: Vec<ResourceLimit>,
    /// `SetModelConfigName`: `configs/<name>.pbtxt` instead of `config.pbtxt` where it
    /// exists (`None`, Triton's empty default, reads `config.pbtxt`).
    pub(crate) model_config_name: Option<String>,
    /// `SetModelLoadThreadCount`: most models loading at once.
    pub(crate) model_load_thread_count: u32,
    /// `SetModelLoadRetryCount`: more tries for a model version whose backend failed.
    pub(crate) model_load_retry_count: u32,
    /// `SetModelNamespacing`: each repository is a namespace.
    pub(crate) model_namespacing: bool,
    /// `SetRepoAgentDirectory`: where repository agents other than `checksum` would be.
    pub(crate) repoagent_directory: PathBuf,
    /// `SetLogInfo`, `SetLogWarn`, `SetLogError`, `SetLogVerbose` and `SetLogCallback`.
    pub(crate) log: LogOptions,
    /// `SetPinnedMemoryPoolByteSize`: the pinned host memory backends may hold.
    pub(crate) pinned_memory_pool_bytes: u64,
    /// `SetCudaMemoryPoolByteSize` calls, `(device, bytes)` in order.
    pub(crate) cuda_memory_pool_bytes: Vec<(i32, u64)>,
}

impl Default for TRITONSERVER_ServerOptions {
    fn default() -> Self {
        Self {
            server_id: "triton".to_string(),
            repositories: Vec::new(),
            control_mode: ControlMode::Poll,
            startup_models: Vec::new(),
            strict_model_config: true,
            strict_readiness: true,
            exit_on_error: true,
            exit_timeout_secs: 30,
            backend_config: Vec::new(),
            cache: None,
            cache_directory: PathBuf::from(nereid_embed::caches::DEFAULT_CACHE_DIRECTORY),
            response_cache_byte_size: None,
            backend_directory: PathBuf::from(nereid_embed::backends::DEFAULT_BACKEND_DIRECTORY),
            metrics_config: MetricsConfig::default(),
            metrics_interval: nereid_embed::DEFAULT_METRICS_INTERVAL,
            cpu_metrics: true,
            gpu_metrics: true,
            rate_limit: false,
            rate_limit_resources: Vec::new(),
            model_config_name: None,
            model_load_thread_count: nereid_core::repository::DEFAULT_LOAD_THREAD_COUNT,
            model_load_retry_count: 0,
            model_namespacing: false,
            repoagent_directory: PathBuf::from(
                nereid_core::repository::DEFAULT_REPOAGENT_DIRECTORY,
            ),
            log: LogOptions::default(),
            pinned_memory_pool_bytes: nereid_shm::pinned::DEFAULT_POOL_BYTES,
            cuda_memory_pool_bytes: Vec::new(),
        }
    }
}

/// Runs `body` on the options behind `options` (checked for null).
fn with_options(
    options: *mut TRITONSERVER_ServerOptions,
    body: impl FnOnce(&mut TRITONSERVER_ServerOptions) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live options object from `TRITONSERVER_ServerOptionsNew`, or null.
        let options = unsafe { ffi::reference_mut(options, "options") }?;
        body(options)
    })
}

/// Runs `body` on the options' log settings, then makes them the process's log at once:
/// Triton's log setters change its one process logger when called, not when a server
/// starts (its `test_binding.py::test_log` logs through `TRITONSERVER_LogMessage` right
/// after setting them), and a log file that cannot be opened fails the setter.
fn with_log_options(
    options: *mut TRITONSERVER_ServerOptions,
    body: impl FnOnce(&mut logging::LogOptions) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    with_options(options, |o| {
        body(&mut o.log)?;
        logging::install(&o.log).map_err(invalid_arg)
    })
}

/// The text of a string argument, as an owned `String`.
fn owned(value: *const c_char, what: &str) -> Result<String, ErrorPtr> {
    // SAFETY: the caller passes a NUL-terminated string or null (checked).
    unsafe { ffi::text(value, what) }.map(str::to_owned)
}

/// `TRITONSERVER_ServerOptionsNew`: options with Triton's defaults.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsNew(
    options: *mut *mut TRITONSERVER_ServerOptions,
) -> ErrorPtr {
    ffi::status(|| {
        if options.is_null() {
            return Err(invalid_arg("options must not be null"));
        }
        let created = Box::into_raw(Box::default());
        // SAFETY: checked for null above; the caller owns the new object.
        unsafe { options.write(created) };
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsDelete`: frees the options (null is ignored).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsDelete(
    options: *mut TRITONSERVER_ServerOptions,
) -> ErrorPtr {
    if !options.is_null() {
        // SAFETY: created by `TRITONSERVER_ServerOptionsNew` and owned by the caller.
        drop(unsafe { Box::from_raw(options) });
    }
    std::ptr::null_mut()
}

/// `TRITONSERVER_ServerOptionsSetServerId`: the server's name in its metadata.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetServerId(
    options: *mut TRITONSERVER_ServerOptions,
    server_id: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        o.server_id = owned(server_id, "server_id")?;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetModelRepositoryPath`: adds a model repository (call it
/// once per repository).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetModelRepositoryPath(
    options: *mut TRITONSERVER_ServerOptions,
    model_repository_path: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        let path = PathBuf::from(owned(model_repository_path, "model_repository_path")?);
        if !o.repositories.contains(&path) {
            o.repositories.push(path);
        }
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetModelControlMode`: NONE=0, POLL=1, EXPLICIT=2.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetModelControlMode(
    options: *mut TRITONSERVER_ServerOptions,
    mode: u32,
) -> ErrorPtr {
    with_options(options, |o| {
        o.control_mode = match mode {
            0 => ControlMode::None,
            1 => ControlMode::Poll,
            2 => ControlMode::Explicit,
            _ => return Err(invalid_arg(format!("unknown control mode '{mode}'"))),
        };
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetStartupModel`: a model to load at start-up in EXPLICIT
/// mode (`*` for all).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetStartupModel(
    options: *mut TRITONSERVER_ServerOptions,
    model_name: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        o.startup_models.push(owned(model_name, "model_name")?);
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetStrictModelConfig`: never auto-complete configurations.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetStrictModelConfig(
    options: *mut TRITONSERVER_ServerOptions,
    strict: bool,
) -> ErrorPtr {
    with_options(options, |o| {
        o.strict_model_config = strict;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetStrictReadiness`: ready only while every model is.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetStrictReadiness(
    options: *mut TRITONSERVER_ServerOptions,
    strict: bool,
) -> ErrorPtr {
    with_options(options, |o| {
        o.strict_readiness = strict;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetExitOnError`: fail `ServerNew` when a model fails to load.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetExitOnError(
    options: *mut TRITONSERVER_ServerOptions,
    exit: bool,
) -> ErrorPtr {
    with_options(options, |o| {
        o.exit_on_error = exit;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetExitTimeout`: seconds `ServerStop` waits for requests.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetExitTimeout(
    options: *mut TRITONSERVER_ServerOptions,
    timeout: u32,
) -> ErrorPtr {
    with_options(options, |o| {
        o.exit_timeout_secs = timeout;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize`: the pinned host memory the
/// server's backends may hold, pinned on demand up to this size.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize(
    options: *mut TRITONSERVER_ServerOptions,
    size: u64,
) -> ErrorPtr {
    with_options(options, |o| {
        o.pinned_memory_pool_bytes = size;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize`: the CUDA memory pool of GPU
/// `gpu_device` that backends allocate GPU buffers from.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize(
    options: *mut TRITONSERVER_ServerOptions,
    gpu_device: i32,
    size: u64,
) -> ErrorPtr {
    with_options(options, |o| {
        o.cuda_memory_pool_bytes.push((gpu_device, size));
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetBackendConfig`: a `--backend-config` setting.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetBackendConfig(
    options: *mut TRITONSERVER_ServerOptions,
    backend_name: *const c_char,
    setting: *const c_char,
    value: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        o.backend_config.push((
            owned(backend_name, "backend_name")?,
            owned(setting, "setting")?,
            owned(value, "value")?,
        ));
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetCacheConfig`: the response cache called `cache_name`
/// with its JSON configuration (checked when the server starts, as Triton does).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetCacheConfig(
    options: *mut TRITONSERVER_ServerOptions,
    cache_name: *const c_char,
    config_json: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        o.cache = Some((
            owned(cache_name, "cache_name")?,
            owned(config_json, "config_json")?,
        ));
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetCacheDirectory`: where cache plugins are looked up.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetCacheDirectory(
    options: *mut TRITONSERVER_ServerOptions,
    cache_dir: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        o.cache_directory = PathBuf::from(owned(cache_dir, "cache_dir")?);
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetBackendDirectory`: where backend libraries are looked
/// up (`<dir>/<backend>/libtriton_<backend>.so`).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetBackendDirectory(
    options: *mut TRITONSERVER_ServerOptions,
    backend_dir: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        o.backend_directory = PathBuf::from(owned(backend_dir, "backend_dir")?);
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetResponseCacheByteSize`: deprecated; a local cache of
/// `size` bytes (0 leaves the cache off).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetResponseCacheByteSize(
    options: *mut TRITONSERVER_ServerOptions,
    size: u64,
) -> ErrorPtr {
    with_options(options, |o| {
        o.response_cache_byte_size = Some(size);
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit`: checked as Triton checks it, then
/// ignored (Nereid runs on CPU).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit(
    options: *mut TRITONSERVER_ServerOptions,
    kind: u32,
    device_id: i32,
    fraction: f64,
) -> ErrorPtr {
    with_options(options, |_| {
        if device_id < 0 {
            return Err(invalid_arg(format!(
                "expects device ID >= 0, got {device_id}"
            )));
        }
        if !(0.0..=1.0).contains(&fraction) {
            return Err(invalid_arg(format!(
                "expects limit fraction to be in range [0.0, 1.0], got {fraction:.6}"
            )));
        }
        // TRITONSERVER_INSTANCEGROUPKIND_GPU
        if kind != 2 {
            // SAFETY: a static string for any value.
            let name =
                unsafe { std::ffi::CStr::from_ptr(crate::types::instance_group_kind_name(kind)) };
            return Err(invalid_arg(format!(
                "given device kind is not supported, got: {}",
                name.to_string_lossy()
            )));
        }
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetRateLimiterMode`: OFF=0 or EXEC_COUNT=1, as
/// `--rate-limit`; anything else is refused.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetRateLimiterMode(
    options: *mut TRITONSERVER_ServerOptions,
    mode: u32,
) -> ErrorPtr {
    with_options(options, |o| {
        o.rate_limit = match mode {
            0 => false,
            1 => true,
            _ => return Err(invalid_arg(format!("unknown rate limit mode '{mode}'"))),
        };
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsAddRateLimiterResource`: as `--rate-limit-resource`; a
/// `device` of -1 gives that many on every device.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsAddRateLimiterResource(
    options: *mut TRITONSERVER_ServerOptions,
    resource_name: *const c_char,
    resource_count: usize,
    device: i32,
) -> ErrorPtr {
    with_options(options, |o| {
        // SAFETY: a NUL-terminated name or null (checked).
        let name = unsafe { ffi::text(resource_name, "resource_name") }?;
        o.rate_limit_resources.push(ResourceLimit {
            name: name.to_string(),
            count: resource_count as u64,
            device: (device >= 0).then_some(device),
        });
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetHostPolicy`: Triton's setting names are checked, the
/// policy itself ignored.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetHostPolicy(
    options: *mut TRITONSERVER_ServerOptions,
    policy_name: *const c_char,
    setting: *const c_char,
    value: *const c_char,
) -> ErrorPtr {
    with_options(options, |_| {
        owned(policy_name, "policy_name")?;
        owned(value, "value")?;
        let setting = owned(setting, "setting")?;
        if setting != "numa-node" && setting != "cpu-cores" {
            return Err(crate::error::unsupported(format!(
                "Unsupported host policy setting '{setting}' is specified, supported settings are 'numa-node', 'cpu-cores'"
            )));
        }
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetMetricsConfig`: one `--metrics-config` setting
/// (`counter_latencies`, `summary_latencies`, `summary_quantiles`,
/// `histogram_latencies`), checked as the flag is. `name` is the configuration group:
/// the global one (`""`) holds those settings; Triton stores the settings of any other
/// group without reading them, so they are accepted and ignored.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetMetricsConfig(
    options: *mut TRITONSERVER_ServerOptions,
    name: *const c_char,
    setting: *const c_char,
    value: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        let name = owned(name, "name")?;
        let setting = owned(setting, "setting")?;
        let value = owned(value, "value")?;
        if !name.is_empty() {
            return Ok(());
        }
        o.metrics_config
            .set(&setting, &value)
            .map_err(|why| invalid_arg(format!("metrics config {setting}={value}: {why}")))
    })
}

/// `TRITONSERVER_ServerOptionsSetMetricsInterval`: how often the CPU utilization and
/// memory gauges are polled, in milliseconds (more than 0, as `--metrics-interval-ms`).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetMetricsInterval(
    options: *mut TRITONSERVER_ServerOptions,
    interval_ms: u64,
) -> ErrorPtr {
    with_options(options, |o| {
        if interval_ms == 0 {
            return Err(invalid_arg("metrics interval must be greater than 0"));
        }
        o.metrics_interval = Duration::from_millis(interval_ms);
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetCpuMetrics`: whether `nv_cpu_utilization` and the CPU
/// memory gauges are polled and exported (default true).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetCpuMetrics(
    options: *mut TRITONSERVER_ServerOptions,
    metrics: bool,
) -> ErrorPtr {
    with_options(options, |o| {
        o.cpu_metrics = metrics;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetGpuMetrics`: whether the GPU gauges are polled through
/// NVML and exported (default true, as in Triton's GPU builds).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetGpuMetrics(
    options: *mut TRITONSERVER_ServerOptions,
    metrics: bool,
) -> ErrorPtr {
    with_options(options, |o| {
        o.gpu_metrics = metrics;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetModelConfigName`: models read `configs/<name>.pbtxt`
/// where it exists, else `config.pbtxt`; an empty name (Triton's default) means
/// `config.pbtxt` only.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetModelConfigName(
    options: *mut TRITONSERVER_ServerOptions,
    model_config_name: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        let name = owned(model_config_name, "model_config_name")?;
        o.model_config_name = (!name.is_empty()).then_some(name);
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetModelLoadThreadCount`: most models loading at once (0
/// counts as 1, as Triton's load pool keeps at least one thread).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetModelLoadThreadCount(
    options: *mut TRITONSERVER_ServerOptions,
    thread_count: u32,
) -> ErrorPtr {
    with_options(options, |o| {
        o.model_load_thread_count = thread_count;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetModelLoadRetryCount`: how many more times a model
/// version whose backend failed to load it is tried.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetModelLoadRetryCount(
    options: *mut TRITONSERVER_ServerOptions,
    retry_count: u32,
) -> ErrorPtr {
    with_options(options, |o| {
        o.model_load_retry_count = retry_count;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetModelNamespacing`: each repository is a namespace, so
/// one model name may appear in several.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetModelNamespacing(
    options: *mut TRITONSERVER_ServerOptions,
    enable_namespace: bool,
) -> ErrorPtr {
    with_options(options, |o| {
        o.model_namespacing = enable_namespace;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetRepoAgentDirectory`: where repository agents other than
/// the built-in `checksum` would be looked up (a model naming one fails to load).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetRepoAgentDirectory(
    options: *mut TRITONSERVER_ServerOptions,
    repoagent_dir: *const c_char,
) -> ErrorPtr {
    with_options(options, |o| {
        o.repoagent_directory = PathBuf::from(owned(repoagent_dir, "repoagent_dir")?);
        Ok(())
    })
}

/// Defines option setters that Triton accepts but that tune machinery Nereid does not
/// have: the options pointer is checked, the values are ignored.
/// `TRITONSERVER_ServerOptionsSetLogInfo`: whether info records reach the log callback.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetLogInfo(
    options: *mut TRITONSERVER_ServerOptions,
    log: bool,
) -> ErrorPtr {
    with_log_options(options, |l| {
        l.info = log;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetLogWarn`: whether warnings reach the log callback.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetLogWarn(
    options: *mut TRITONSERVER_ServerOptions,
    log: bool,
) -> ErrorPtr {
    with_log_options(options, |l| {
        l.warn = log;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetLogError`: whether errors reach the log callback.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetLogError(
    options: *mut TRITONSERVER_ServerOptions,
    log: bool,
) -> ErrorPtr {
    with_log_options(options, |l| {
        l.error = log;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetLogVerbose`: the verbose level of the records the log
/// callback receives (0 none; 1 Nereid's debug records; 2 its trace records too).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetLogVerbose(
    options: *mut TRITONSERVER_ServerOptions,
    level: i32,
) -> ErrorPtr {
    with_log_options(options, |l| {
        l.verbose = level;
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetLogFile`: the file Triton's log lines are appended to
/// (empty: stderr) when no log callback is set.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetLogFile(
    options: *mut TRITONSERVER_ServerOptions,
    file: *const c_char,
) -> ErrorPtr {
    with_log_options(options, |l| {
        let file = owned(file, "file")?;
        l.file = (!file.is_empty()).then(|| PathBuf::from(file));
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetLogFormat`: the stamp of the log lines
/// (`TRITONSERVER_LOG_DEFAULT` 0, `TRITONSERVER_LOG_ISO8601` 1).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetLogFormat(
    options: *mut TRITONSERVER_ServerOptions,
    format: u32,
) -> ErrorPtr {
    with_log_options(options, |l| {
        l.format = match format {
            0 => LogFormat::Default,
            1 => LogFormat::Iso8601,
            other => return Err(invalid_arg(format!("invalid log format '{other}'"))),
        };
        Ok(())
    })
}

/// `TRITONSERVER_ServerOptionsSetLogCallback`: the function that receives each enabled
/// log record of the servers started with these options, with `userp`; null clears it.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerOptionsSetLogCallback(
    options: *mut TRITONSERVER_ServerOptions,
    callback: Option<LogCallbackFn>,
    userp: *mut c_void,
) -> ErrorPtr {
    with_log_options(options, |l| {
        l.callback = logging::callback(callback, userp);
        Ok(())
    })
}

macro_rules! ignored_options {
    ($($(#[$meta:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            options: *mut TRITONSERVER_ServerOptions,
            $($arg: $ty),*
        ) -> ErrorPtr {
            $(let _ = $arg;)*
            with_options(options, |_| Ok(()))
        }
    )*};
}

ignored_options! {
    /// `TRITONSERVER_ServerOptionsSetCudaVirtualAddressSize`: ignored (no CUDA).
    TRITONSERVER_ServerOptionsSetCudaVirtualAddressSize(gpu_device: i32, size: usize);
    /// `TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability`: ignored (no CUDA).
    TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability(cc: f64);
    /// `TRITONSERVER_ServerOptionsSetBufferManagerThreadCount`: ignored.
    TRITONSERVER_ServerOptionsSetBufferManagerThreadCount(count: u32);
    /// `TRITONSERVER_ServerOptionsSetEnablePeerAccess`: ignored (no GPUs).
    TRITONSERVER_ServerOptionsSetEnablePeerAccess(enable: bool);
    /// `TRITONSERVER_ServerOptionsSetMetrics`: ignored (no metrics port in-process).
    TRITONSERVER_ServerOptionsSetMetrics(metrics: bool);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `set` on fresh options and returns them, or the error message it answered.
    fn set(
        set: impl FnOnce(*mut TRITONSERVER_ServerOptions) -> ErrorPtr,
    ) -> Result<TRITONSERVER_ServerOptions, String> {
        let mut options = TRITONSERVER_ServerOptions::default();
        let error = set(&mut options);
        if error.is_null() {
            return Ok(options);
        }
        // SAFETY: a live error the setter just created; deleted once, right after.
        let message = unsafe {
            let text = std::ffi::CStr::from_ptr(crate::error::TRITONSERVER_ErrorMessage(error))
                .to_string_lossy()
                .into_owned();
            crate::error::TRITONSERVER_ErrorDelete(error);
            text
        };
        Err(message)
    }

    #[test]
    fn the_repository_setters_take_effect() {
        let defaults = TRITONSERVER_ServerOptions::default();
        assert_eq!(defaults.model_load_thread_count, 4);
        assert_eq!(
            defaults.repoagent_directory,
            PathBuf::from("/opt/tritonserver/repoagents")
        );
        let name = c"h100";
        // SAFETY (every call below): live options and NUL-terminated strings or null.
        let o = set(|o| unsafe { TRITONSERVER_ServerOptionsSetModelConfigName(o, name.as_ptr()) });
        assert_eq!(o.expect("set").model_config_name.as_deref(), Some("h100"));
        let o = set(|o| unsafe { TRITONSERVER_ServerOptionsSetModelConfigName(o, c"".as_ptr()) });
        assert_eq!(o.expect("set").model_config_name, None);
        let o = set(|o| unsafe { TRITONSERVER_ServerOptionsSetModelLoadThreadCount(o, 2) });
        assert_eq!(o.expect("set").model_load_thread_count, 2);
        let o = set(|o| unsafe { TRITONSERVER_ServerOptionsSetModelLoadRetryCount(o, 3) });
        assert_eq!(o.expect("set").model_load_retry_count, 3);
        let o = set(|o| unsafe { TRITONSERVER_ServerOptionsSetModelNamespacing(o, true) });
        assert!(o.expect("set").model_namespacing);
        let dir = c"/agents";
        let o =
            set(|o| unsafe { TRITONSERVER_ServerOptionsSetRepoAgentDirectory(o, dir.as_ptr()) });
        assert_eq!(
            o.expect("set").repoagent_directory,
            PathBuf::from("/agents")
        );
    }

    #[test]
    fn null_arguments_are_invalid() {
        let null = std::ptr::null();
        // SAFETY (every call below): live options, null strings (checked by the setters).
        let e = set(|o| unsafe { TRITONSERVER_ServerOptionsSetModelConfigName(o, null) });
        assert_eq!(
            e.err().as_deref(),
            Some("model_config_name must not be null")
        );
        let e = set(|o| unsafe { TRITONSERVER_ServerOptionsSetRepoAgentDirectory(o, null) });
        assert_eq!(e.err().as_deref(), Some("repoagent_dir must not be null"));
        // SAFETY: a null options pointer is checked.
        let e =
            unsafe { TRITONSERVER_ServerOptionsSetModelNamespacing(std::ptr::null_mut(), true) };
        assert!(!e.is_null());
        // SAFETY: the error just created, owned here.
        unsafe { crate::error::TRITONSERVER_ErrorDelete(e) };
    }
}
