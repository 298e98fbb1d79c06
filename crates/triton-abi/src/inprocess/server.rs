//! `TRITONSERVER_Server`: the in-process server's stop and delete, health, metadata and
//! model repository calls, each one call on the core facade (`start.rs` creates it).
#![allow(unsafe_code)]

use std::ffi::c_char;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use nereid_core::repository::{LoadRequest, FILE_PREFIX};

use super::engine::Engine;
use super::message::TRITONSERVER_Message;
use super::parameter::{self, TRITONSERVER_Parameter, Value};
use crate::error::{from_core, invalid_arg, new_error, ErrorPtr, TRITONSERVER_Error_Code};
use crate::ffi::{self, put};

/// The object behind `TRITONSERVER_Server*`.
pub struct TRITONSERVER_Server {
    pub(crate) engine: Engine,
    /// Seconds `ServerStop` waits (`SetExitTimeout`, then `ServerSetExitTimeout`).
    exit_timeout_secs: AtomicU32,
    /// Set by the first stop, so that delete after stop does not stop twice.
    stopped: AtomicBool,
}

impl TRITONSERVER_Server {
    /// A server object over `engine`, stopped within `exit_timeout_secs` unless the
    /// program sets another timeout. Hosted backends get one over the server they run
    /// in (Triton's default 30 s): their BLS requests and readiness checks go through it
    /// like a C program's.
    pub(crate) fn new(engine: Engine, exit_timeout_secs: u32) -> Self {
        Self {
            engine,
            exit_timeout_secs: AtomicU32::new(exit_timeout_secs),
            stopped: AtomicBool::new(false),
        }
    }

    /// Triton's answer once the server is stopping: health calls fail with "Server
    /// exiting" (and write false), model calls with "Server not ready".
    fn exiting(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Refuses model and repository calls after a stop, as Triton does.
    fn require_ready(&self) -> Result<(), ErrorPtr> {
        if self.exiting() {
            return Err(new_error(
                TRITONSERVER_Error_Code::Unavailable,
                "Server not ready",
            ));
        }
        Ok(())
    }

    /// A health answer: `value` unless the server is stopping.
    fn health(
        &self,
        out: *mut bool,
        value: impl FnOnce() -> bool,
        what: &str,
    ) -> Result<(), ErrorPtr> {
        if self.exiting() {
            put(out, false, what)?;
            return Err(new_error(
                TRITONSERVER_Error_Code::Unavailable,
                "Server exiting",
            ));
        }
        put(out, value(), what)
    }

    /// Stops the server once; false when its models had not stopped within the exit
    /// timeout (a later stop does nothing and succeeds, as Triton's does).
    fn stop(&self) -> bool {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return true;
        }
        let secs = self.exit_timeout_secs.load(Ordering::SeqCst);
        self.engine.stop(Duration::from_secs(u64::from(secs)))
    }
}

/// The version argument of the C API: -1 (any negative) is the latest ready version.
pub(crate) fn version(model_version: i64) -> Option<i64> {
    (model_version >= 0).then_some(model_version)
}

/// Runs `body` on the server behind `server` (checked for null).
fn with_server(
    server: *mut TRITONSERVER_Server,
    body: impl FnOnce(&TRITONSERVER_Server) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live server from `TRITONSERVER_ServerNew`, or null (checked).
        let server = unsafe { ffi::reference(server, "server") }?;
        body(server)
    })
}

/// Runs `body` with the server and a model name (both checked).
fn with_model(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    body: impl FnOnce(&TRITONSERVER_Server, &str) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    with_server(server, |s| {
        // SAFETY: a NUL-terminated name or null (checked).
        let name = unsafe { ffi::text(model_name, "model_name") }?;
        s.require_ready()?;
        body(s, name)
    })
}

/// `TRITONSERVER_ServerDelete`: stops the server (if not yet stopped) and frees it.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerDelete(server: *mut TRITONSERVER_Server) -> ErrorPtr {
    ffi::status(|| {
        if server.is_null() {
            return Ok(());
        }
        // SAFETY: created by `TRITONSERVER_ServerNew` and owned by the caller.
        let server = unsafe { Box::from_raw(server) };
        // A stop that timed out is not the delete's failure: the server is freed anyway.
        let _ = server.stop();
        drop(server);
        Ok(())
    })
}

/// `TRITONSERVER_ServerStop`: readiness turns false and the models stop, waiting at most
/// the exit timeout; INTERNAL with Triton's words when they have not stopped by then
/// (null is ignored, as in Triton).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerStop(server: *mut TRITONSERVER_Server) -> ErrorPtr {
    if server.is_null() {
        return std::ptr::null_mut();
    }
    with_server(server, |s| {
        if s.stop() {
            Ok(())
        } else {
            Err(new_error(
                TRITONSERVER_Error_Code::Internal,
                "Exit timeout expired. Exiting immediately.",
            ))
        }
    })
}

/// `TRITONSERVER_ServerSetExitTimeout`: the stop timeout, in seconds.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerSetExitTimeout(
    server: *mut TRITONSERVER_Server,
    timeout: u32,
) -> ErrorPtr {
    if server.is_null() {
        return std::ptr::null_mut();
    }
    with_server(server, |s| {
        s.exit_timeout_secs.store(timeout, Ordering::SeqCst);
        Ok(())
    })
}

/// `TRITONSERVER_ServerRegisterModelRepository`: adds a repository while the server runs
/// (explicit model control), each mapping parameter naming a model directory (its name)
/// and the model name it goes by (its string value), with Triton's checks.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerRegisterModelRepository(
    server: *mut TRITONSERVER_Server,
    repository_path: *const c_char,
    name_mapping: *const *const TRITONSERVER_Parameter,
    mapping_count: u32,
) -> ErrorPtr {
    with_server(server, |s| {
        s.require_ready()?;
        // SAFETY: `mapping_count` parameter pointers at `name_mapping`, or null (checked).
        let mappings = unsafe {
            parameter::list(
                name_mapping,
                mapping_count as usize,
                "model mappings are not provided while mapping count is non-zero",
            )
        }?;
        // SAFETY: a NUL-terminated path or null (checked).
        let path = unsafe { ffi::text(repository_path, "repository_path") }?;
        let mut mapping = Vec::with_capacity(mappings.len());
        for p in mappings {
            let Value::String(model) = &p.value else {
                return Err(invalid_arg(format!(
                    "Mapped model name must be a string, found another type for {}",
                    p.name()
                )));
            };
            mapping.push((p.name(), model.to_string_lossy().into_owned()));
        }
        let server = s.engine.server();
        s.engine
            .block_on(server.register_model_repository(Path::new(path), &mapping))
            .map_err(|e| from_core(&e))
    })
}

/// `TRITONSERVER_ServerUnregisterModelRepository`: removes a repository registered
/// while the server runs; its loaded models stay loaded, as in Triton.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerUnregisterModelRepository(
    server: *mut TRITONSERVER_Server,
    repository_path: *const c_char,
) -> ErrorPtr {
    with_server(server, |s| {
        s.require_ready()?;
        // SAFETY: a NUL-terminated path or null (checked).
        let path = unsafe { ffi::text(repository_path, "repository_path") }?;
        s.engine
            .server()
            .unregister_model_repository(Path::new(path))
            .map_err(|e| from_core(&e))
    })
}

/// `TRITONSERVER_ServerPollModelRepository`: re-scans the repositories (POLL mode).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerPollModelRepository(
    server: *mut TRITONSERVER_Server,
) -> ErrorPtr {
    with_server(server, |s| {
        s.engine
            .block_on(s.engine.server().poll_repository())
            .map_err(|e| from_core(&e))
    })
}

/// `TRITONSERVER_ServerIsLive`: liveness.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerIsLive(
    server: *mut TRITONSERVER_Server,
    live: *mut bool,
) -> ErrorPtr {
    with_server(server, |s| {
        s.health(live, || s.engine.server().is_live(), "live")
    })
}

/// `TRITONSERVER_ServerIsReady`: readiness (strict readiness counts every model).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerIsReady(
    server: *mut TRITONSERVER_Server,
    ready: *mut bool,
) -> ErrorPtr {
    with_server(server, |s| {
        s.health(ready, || s.engine.server().is_ready(), "ready")
    })
}

/// `TRITONSERVER_ServerModelIsReady`: whether the version is ready to serve. A model
/// that is not loaded (never loaded, unloaded, unknown) is not ready, without an error,
/// as Triton 2.51's `InferenceServer::ModelIsReady` answers (measured with its library:
/// Triton's `test_binding.py` `test_server_explicit` expects `False`).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerModelIsReady(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    model_version: i64,
    ready: *mut bool,
) -> ErrorPtr {
    with_model(server, model_name, |s, name| {
        if ready.is_null() {
            return Err(invalid_arg("ready must not be null"));
        }
        let serving = s
            .engine
            .server()
            .model_spec(name, version(model_version))
            .is_ok();
        put(ready, serving, "ready")
    })
}

/// `TRITONSERVER_BATCH_UNKNOWN`
const BATCH_UNKNOWN: u32 = 1;
/// `TRITONSERVER_BATCH_FIRST_DIM`
const BATCH_FIRST_DIM: u32 = 2;
/// `TRITONSERVER_TXN_ONE_TO_ONE`
const TXN_ONE_TO_ONE: u32 = 1;
/// `TRITONSERVER_TXN_DECOUPLED`
const TXN_DECOUPLED: u32 = 2;

/// `TRITONSERVER_ServerModelBatchProperties`: FIRST_DIM for a batching model, else
/// UNKNOWN; `voidp` is always null.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerModelBatchProperties(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    model_version: i64,
    flags: *mut u32,
    voidp: *mut *mut std::ffi::c_void,
) -> ErrorPtr {
    if !voidp.is_null() {
        // SAFETY: a non-null out-parameter from the caller.
        unsafe { voidp.write(std::ptr::null_mut()) };
    }
    with_model(server, model_name, |s, name| {
        let spec = s
            .engine
            .server()
            .model_spec(name, version(model_version))
            .map_err(|e| from_core(&e))?;
        let batch = if spec.max_batch_size > 0 {
            BATCH_FIRST_DIM
        } else {
            BATCH_UNKNOWN
        };
        put(flags, batch, "flags")
    })
}

/// `TRITONSERVER_ServerModelTransactionProperties`: ONE_TO_ONE, or DECOUPLED for a
/// decoupled model; `voidp` is always null.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerModelTransactionProperties(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    model_version: i64,
    txn_flags: *mut u32,
    voidp: *mut *mut std::ffi::c_void,
) -> ErrorPtr {
    if !voidp.is_null() {
        // SAFETY: a non-null out-parameter from the caller.
        unsafe { voidp.write(std::ptr::null_mut()) };
    }
    with_model(server, model_name, |s, name| {
        let spec = s
            .engine
            .server()
            .model_spec(name, version(model_version))
            .map_err(|e| from_core(&e))?;
        let txn = if spec.decoupled {
            TXN_DECOUPLED
        } else {
            TXN_ONE_TO_ONE
        };
        put(txn_flags, txn, "txn_flags")
    })
}

/// `TRITONSERVER_ServerMetadata`: name, version and extensions as JSON.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerMetadata(
    server: *mut TRITONSERVER_Server,
    server_metadata: *mut *mut TRITONSERVER_Message,
) -> ErrorPtr {
    with_server(server, |s| {
        let value = s.engine.server().server_metadata_json();
        // SAFETY: an out-parameter from the caller, checked for null by `give`.
        unsafe { TRITONSERVER_Message::give(server_metadata, &value) }
    })
}

/// `TRITONSERVER_ServerModelMetadata`: the model's metadata JSON, as HTTP answers it.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerModelMetadata(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    model_version: i64,
    model_metadata: *mut *mut TRITONSERVER_Message,
) -> ErrorPtr {
    with_model(server, model_name, |s, name| {
        let value = s
            .engine
            .server()
            .model_metadata_json(name, version(model_version))
            .map_err(|e| from_core(&e))?;
        // SAFETY: an out-parameter from the caller, checked for null by `give`.
        unsafe { TRITONSERVER_Message::give(model_metadata, &value) }
    })
}

/// `TRITONSERVER_ServerModelStatistics`: statistics JSON of a model (all ready versions
/// for -1) or of every model for an empty name.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerModelStatistics(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    model_version: i64,
    model_stats: *mut *mut TRITONSERVER_Message,
) -> ErrorPtr {
    with_model(server, model_name, |s, name| {
        let name = (!name.is_empty()).then_some(name);
        let value = s
            .engine
            .server()
            .statistics_json(name, version(model_version))
            .map_err(|e| from_core(&e))?;
        // SAFETY: an out-parameter from the caller, checked for null by `give`.
        unsafe { TRITONSERVER_Message::give(model_stats, &value) }
    })
}

/// `TRITONSERVER_ServerModelConfig`: the model's configuration JSON (version 1, the only
/// one Triton defines).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerModelConfig(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    model_version: i64,
    config_version: u32,
    model_config: *mut *mut TRITONSERVER_Message,
) -> ErrorPtr {
    with_model(server, model_name, |s, name| {
        let config = s
            .engine
            .server()
            .model_config(name, version(model_version))
            .map_err(|e| from_core(&e))?;
        if config_version != 1 {
            return Err(invalid_arg(format!(
                "model configuration version {config_version} not supported, supported versions are: 1"
            )));
        }
        // SAFETY: an out-parameter from the caller, checked for null by `give`.
        unsafe { TRITONSERVER_Message::give(model_config, &config.json) }
    })
}

/// `TRITONSERVER_INDEX_FLAG_READY`
const INDEX_FLAG_READY: u32 = 1;

/// `TRITONSERVER_ServerModelIndex`: the repository index JSON (ready versions only with
/// `TRITONSERVER_INDEX_FLAG_READY`).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerModelIndex(
    server: *mut TRITONSERVER_Server,
    flags: u32,
    model_index: *mut *mut TRITONSERVER_Message,
) -> ErrorPtr {
    with_server(server, |s| {
        s.require_ready()?;
        let ready_only = flags & INDEX_FLAG_READY != 0;
        let value = s
            .engine
            .block_on(s.engine.server().repository_index_json(ready_only))
            .map_err(|e| from_core(&e))?;
        // SAFETY: an out-parameter from the caller, checked for null by `give`.
        unsafe { TRITONSERVER_Message::give(model_index, &value) }
    })
}

/// Loads `name` with `request` and waits for the load to finish.
fn load(server: &TRITONSERVER_Server, name: &str, request: LoadRequest) -> Result<(), ErrorPtr> {
    server
        .engine
        .block_on(server.engine.server().load_model(name, request))
        .map_err(|e| from_core(&e))
}

/// `TRITONSERVER_ServerLoadModel`: loads (or reloads) a model (EXPLICIT mode).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerLoadModel(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
) -> ErrorPtr {
    with_model(server, model_name, |s, name| {
        load(s, name, LoadRequest::default())
    })
}

/// `TRITONSERVER_ServerLoadModelWithParameters`: a load with a `config` (STRING, JSON
/// model configuration) and `file:<path>` (BYTES) parameters.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerLoadModelWithParameters(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    parameters: *const *const TRITONSERVER_Parameter,
    parameter_count: u64,
) -> ErrorPtr {
    with_model(server, model_name, |s, name| {
        let count = usize::try_from(parameter_count)
            .map_err(|_| invalid_arg("parameter_count is too large"))?;
        // SAFETY: `count` parameter pointers at `parameters`, or null (checked).
        let parameters = unsafe {
            parameter::list(
                parameters,
                count,
                "load parameters are not provided while parameter count is non-zero",
            )
        }?;
        let mut request = LoadRequest::default();
        for p in parameters {
            let key = p.name();
            match (&p.value, key.as_str()) {
                (Value::String(config), "config") => {
                    request.config = Some(config.to_string_lossy().into_owned());
                }
                (_, "config") => {
                    return Err(invalid_arg(
                        "the 'config' parameter must be a string holding the JSON model configuration",
                    ))
                }
                (Value::Bytes(content), k) if k.starts_with(FILE_PREFIX) => {
                    request.files.push((key.clone(), Bytes::from(content.clone())));
                }
                (_, k) if k.starts_with(FILE_PREFIX) => {
                    return Err(invalid_arg(format!(
                        "failed to load '{name}', failed to poll from model repository: File parameter '{k}' must be of type BYTES"
                    )))
                }
                _ => {}
            }
        }
        load(s, name, request)
    })
}

/// Unloads `name` (and the models that only it used, with `dependents`).
fn unload(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    dependents: bool,
) -> ErrorPtr {
    with_model(server, model_name, |s, name| {
        s.engine
            .block_on(s.engine.server().unload_model(name, dependents))
            .map_err(|e| from_core(&e))
    })
}

/// `TRITONSERVER_ServerUnloadModel`: unloads a model (EXPLICIT mode).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerUnloadModel(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
) -> ErrorPtr {
    unload(server, model_name, false)
}

/// `TRITONSERVER_ServerUnloadModelAndDependents`: unloads a model and its dependents.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerUnloadModelAndDependents(
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
) -> ErrorPtr {
    unload(server, model_name, true)
}
