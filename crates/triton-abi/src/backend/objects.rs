//! The objects a backend library is handed — `TRITONBACKEND_Backend`, `_Model`,
//! `_ModelInstance` and the handles that own them — and the library's entry points that
//! take them. They refer to one another (a backend holds its library, whose entry points
//! take the backend), so they live together here; the calls a library makes on them are
//! in `hosted.rs`, `model.rs` and `instance.rs`, above this file. Only
//! `TRITONBACKEND_ModelInstanceExecute` is required of a library, as in Triton (core
//! `src/backend_manager.cc`); the other entry points are optional.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32};
use std::sync::{Arc, OnceLock};

use libloading::os::unix::Library;
use nereid_core::stats::ModelStats;
use nereid_core::{Error, Result};
use nereid_proto::inference::ModelInstanceGroup;
use parking_lot::Mutex;

use super::memory::TRITONBACKEND_MemoryManager;
use super::request::TRITONBACKEND_Request;
use crate::dl::{dlerror_text, entry_point, optional_entry_point};
use crate::error::{callee_result, ErrorPtr};
use crate::inprocess::message::TRITONSERVER_Message;
use crate::inprocess::server::TRITONSERVER_Server;

/// `TRITONBACKEND_ARTIFACT_FILESYSTEM`: artifacts are files in a local directory.
pub const ARTIFACT_FILESYSTEM: u32 = 0;

/// `TRITONBACKEND_Initialize` / `Finalize`.
pub type BackendFn = unsafe extern "C" fn(*mut TRITONBACKEND_Backend) -> ErrorPtr;
/// `TRITONBACKEND_GetBackendAttribute`.
pub type AttributeFn = unsafe extern "C" fn(
    *mut TRITONBACKEND_Backend,
    *mut TRITONBACKEND_BackendAttribute,
) -> ErrorPtr;
/// `TRITONBACKEND_ModelInitialize` / `ModelFinalize`.
pub type ModelFn = unsafe extern "C" fn(*mut TRITONBACKEND_Model) -> ErrorPtr;
/// `TRITONBACKEND_ModelInstanceInitialize` / `ModelInstanceFinalize`.
pub type InstanceFn = unsafe extern "C" fn(*mut TRITONBACKEND_ModelInstance) -> ErrorPtr;
/// `TRITONBACKEND_ModelInstanceExecute`.
pub type ExecuteFn = unsafe extern "C" fn(
    *mut TRITONBACKEND_ModelInstance,
    *mut *mut TRITONBACKEND_Request,
    u32,
) -> ErrorPtr;

/// A loaded backend library and its entry points, valid while it stays loaded.
pub struct BackendLibrary {
    pub initialize: Option<BackendFn>,
    pub finalize: Option<BackendFn>,
    pub attributes: Option<AttributeFn>,
    pub model_initialize: Option<ModelFn>,
    pub model_finalize: Option<ModelFn>,
    pub instance_initialize: Option<InstanceFn>,
    pub instance_finalize: Option<InstanceFn>,
    pub execute: ExecuteFn,
    // Last: unloaded after everything above is done with.
    _library: Library,
}

impl BackendLibrary {
    /// Loads the library at `path` for backend `name`, its Triton core-library
    /// dependency provided first (see `soname`). Its undefined `TRITON*` symbols
    /// resolve to this process's (the nereid executable's exports, or the embedding
    /// program's libtritonserver.so), which come first in the global scope.
    pub fn open(name: &str, path: &Path) -> Result<Self> {
        super::soname::provide_core_libraries(path)?;
        // SAFETY: loading a library runs its initializers; a backend library is code the
        // operator chose to run in this process, as with Triton.
        let library = unsafe { crate::dl::open_plugin(path) }.map_err(|e| {
            Error::invalid_arg(format!(
                "unable to load backend library for backend '{name}': {}",
                dlerror_text(&e)
            ))
        })?;
        let named = |e: Error| e.prefixed(&format!("backend '{name}': "));
        // SAFETY: each name is paired with its signature from tritonbackend.h.
        unsafe {
            Ok(Self {
                initialize: optional_entry_point(&library, "TRITONBACKEND_Initialize"),
                finalize: optional_entry_point(&library, "TRITONBACKEND_Finalize"),
                attributes: optional_entry_point(&library, "TRITONBACKEND_GetBackendAttribute"),
                model_initialize: optional_entry_point(&library, "TRITONBACKEND_ModelInitialize"),
                model_finalize: optional_entry_point(&library, "TRITONBACKEND_ModelFinalize"),
                instance_initialize: optional_entry_point(
                    &library,
                    "TRITONBACKEND_ModelInstanceInitialize",
                ),
                instance_finalize: optional_entry_point(
                    &library,
                    "TRITONBACKEND_ModelInstanceFinalize",
                ),
                execute: entry_point(&library, "TRITONBACKEND_ModelInstanceExecute")
                    .map_err(named)?,
                _library: library,
            })
        }
    }
}

/// The server handle backends get through `TRITONBACKEND_ModelServer`, set once the
/// server exists (before any model loads).
#[derive(Default)]
pub(crate) struct ServerSlot {
    pub(crate) server: OnceLock<Box<TRITONSERVER_Server>>,
}

impl ServerSlot {
    /// The handle, or null before the server exists.
    pub(crate) fn pointer(&self) -> *mut TRITONSERVER_Server {
        self.server.get().map_or(std::ptr::null_mut(), |s| {
            std::ptr::from_ref::<TRITONSERVER_Server>(s).cast_mut()
        })
    }
}

/// The object behind `TRITONBACKEND_Backend*`.
pub struct TRITONBACKEND_Backend {
    pub(crate) name: CString,
    /// The backend's directory, where its library and artifacts are.
    pub(crate) directory: CString,
    /// `{"cmdline": {...}}`: the global and the backend's own `--backend-config`.
    pub(crate) config: TRITONSERVER_Message,
    pub(crate) state: AtomicPtr<c_void>,
    pub(crate) execution_policy: AtomicU32,
    pub(crate) memory_manager: TRITONBACKEND_MemoryManager,
    pub(crate) library: BackendLibrary,
    pub(crate) server: Arc<ServerSlot>,
    /// Whether models may auto-complete their configuration.
    pub(crate) auto_complete: bool,
}

impl TRITONBACKEND_Backend {
    /// The name models use for this backend.
    pub fn name(&self) -> &str {
        self.name.to_str().unwrap_or_default()
    }
}

/// What `TRITONBACKEND_GetBackendAttribute` fills in: the preferred instance groups the
/// core normalizes a model's groups with, and whether instances may be initialized in
/// parallel (recorded; Nereid initializes one model's instances in turn).
#[derive(Debug, Default)]
pub struct TRITONBACKEND_BackendAttribute {
    pub(crate) preferred_groups: Vec<ModelInstanceGroup>,
    pub(crate) parallel_instance_loading: bool,
}

/// A backend library, initialized; finalized on drop (after its last model).
pub struct BackendHandle {
    pub(crate) backend: Box<TRITONBACKEND_Backend>,
    /// Models initialized for auto-completion, waiting for their load.
    pub(crate) pending: PendingModels,
}

// SAFETY: the backend object is only read after initialization (state and policy are
// atomics); a backend library must accept calls from any thread, as under Triton.
unsafe impl Send for BackendHandle {}
// SAFETY: as for Send.
unsafe impl Sync for BackendHandle {}

impl BackendHandle {
    /// The backend object's pointer, for the library's calls.
    pub(crate) fn pointer(&self) -> *mut TRITONBACKEND_Backend {
        std::ptr::from_ref::<TRITONBACKEND_Backend>(&self.backend).cast_mut()
    }

    /// The backend object.
    pub(crate) fn object(&self) -> &TRITONBACKEND_Backend {
        &self.backend
    }
}

impl Drop for BackendHandle {
    fn drop(&mut self) {
        if let Some(finalize) = self.backend.library.finalize {
            // SAFETY: the library's own entry point, called once with its backend object.
            let error = unsafe { finalize(self.pointer()) };
            if let Err(e) = callee_result(error) {
                tracing::error!("failed finalizing backend '{}': {e}", self.backend.name());
            }
        }
    }
}

/// The object behind `TRITONBACKEND_Model*`.
pub struct TRITONBACKEND_Model {
    pub(crate) name: CString,
    pub(crate) version: u64,
    /// The model's directory (the parent of its version directories).
    pub(crate) repository: CString,
    /// The configuration `TRITONBACKEND_ModelConfig` serializes.
    pub(crate) config: Mutex<serde_json::Value>,
    /// Whether this initialization may auto-complete the configuration.
    pub(crate) auto_complete: bool,
    /// `ModelSetConfig` is only allowed while the model initializes.
    pub(crate) initializing: AtomicBool,
    /// The configuration a backend set, as JSON text, until the loader takes it.
    pub(crate) completed: Mutex<Option<String>>,
    pub(crate) state: AtomicPtr<c_void>,
    /// The backend library serving the model; `None` for the model object a custom
    /// batching library is given when the model is served natively.
    pub(crate) backend: Option<Arc<BackendHandle>>,
}

impl TRITONBACKEND_Model {
    /// The model's name.
    pub(crate) fn name(&self) -> &str {
        self.name.to_str().unwrap_or_default()
    }
}

/// An initialized model; finalized on drop, after its last instance.
pub struct ModelHandle {
    pub(crate) model: Box<TRITONBACKEND_Model>,
}

// SAFETY: the model object's mutable parts are behind locks and atomics; a backend
// library must accept calls for a model from any of its instances' threads, as under
// Triton.
unsafe impl Send for ModelHandle {}
// SAFETY: as for Send.
unsafe impl Sync for ModelHandle {}

impl ModelHandle {
    /// The model object's pointer, for the library's calls.
    pub(crate) fn pointer(&self) -> *mut TRITONBACKEND_Model {
        std::ptr::from_ref::<TRITONBACKEND_Model>(&self.model).cast_mut()
    }

    /// The model object.
    pub(crate) fn object(&self) -> &TRITONBACKEND_Model {
        &self.model
    }
}

impl Drop for ModelHandle {
    fn drop(&mut self) {
        let library = self.model.backend.as_ref().map(|b| &b.object().library);
        if let Some(finalize) = library.and_then(|l| l.model_finalize) {
            // SAFETY: the library's entry point, once, after every instance finalized
            // (each holds this handle).
            let error = unsafe { finalize(self.pointer()) };
            if let Err(e) = callee_result(error) {
                tracing::error!("failed finalizing model '{}': {e}", self.model.name());
            }
        }
    }
}

/// Models initialized for auto-completion, by name and version, until their load takes
/// them (Triton initializes a model once; so does Nereid).
#[derive(Default)]
pub struct PendingModels(pub(crate) Mutex<HashMap<(String, i64), Arc<ModelHandle>>>);

/// Execution phases a backend reported: exec start, compute start, compute end, exec
/// end (ns since the epoch, as Triton's backends take them).
pub(crate) type Phases = [u64; 4];

/// The object behind `TRITONBACKEND_ModelInstance*`.
pub struct TRITONBACKEND_ModelInstance {
    pub(crate) name: CString,
    pub(crate) kind: u32,
    pub(crate) device_id: i32,
    /// Of a `passive` group: never scheduled (`TRITONBACKEND_ModelInstanceIsPassive`).
    pub(crate) passive: bool,
    /// `{"<host policy>": {}}`: the instance's host policy (Triton's default name).
    pub(crate) host_policy: TRITONSERVER_Message,
    pub(crate) state: AtomicPtr<c_void>,
    pub(crate) model: Arc<ModelHandle>,
    /// The phases of the current execution, from `ReportBatchStatistics` (or the first
    /// `ReportStatistics`).
    pub(crate) reported: Mutex<Option<Phases>>,
    /// The model version's statistics, for `ReportResponseStatistics`.
    pub(crate) stats: Arc<ModelStats>,
}
