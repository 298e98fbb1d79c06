//! [`HostedBackend`]: one loaded backend library as a core backend, initialized once per
//! backend name and shared by every model that resolves to it; and the
//! `TRITONBACKEND_Backend*` calls a library makes on its backend object (configuration,
//! artifacts directory, state, attributes).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;

use nereid_core::backend::{cmdline_config, Backend, ModelBackend};
use nereid_core::config::ModelConfig;
use nereid_core::model::ModelSpec;
use nereid_core::{Error, Result};
use nereid_proto::inference::ModelInstanceGroup;

use super::memory::TRITONBACKEND_MemoryManager;
use super::model::HostedModel;
use super::objects::{
    BackendHandle, BackendLibrary, PendingModels, ServerSlot, TRITONBACKEND_Backend,
    TRITONBACKEND_BackendAttribute, ARTIFACT_FILESYSTEM,
};
use super::resolve::BackendLocation;
use crate::error::{callee_result, invalid_arg, ErrorPtr};
use crate::ffi::{self, put};
use crate::inprocess::message::TRITONSERVER_Message;
use crate::types::instance_group_kind_of;

/// The TRITONBACKEND API version this server implements (`tritonbackend.h` 1.19).
pub const API_VERSION: (u32, u32) = (1, 19);

/// Where backend libraries are found and what they are told.
#[derive(Debug, Clone)]
pub struct HostedSettings {
    /// `--backend-directory`: where backend libraries are looked for after the model's
    /// own folders, and where the python-based backends' folders are.
    pub directory: PathBuf,
    /// `--backend-config` settings as (backend, key, value); an empty backend name is a
    /// global setting every backend gets.
    pub config: Vec<(String, String, String)>,
    /// `--strict-model-config`: backends are told not to auto-complete.
    pub strict_model_config: bool,
}

/// A Triton backend library as a core backend.
pub struct HostedBackend {
    handle: Arc<BackendHandle>,
    /// What `TRITONBACKEND_GetBackendAttribute` said (empty without that entry point).
    attributes: TRITONBACKEND_BackendAttribute,
}

impl HostedBackend {
    /// Loads the library `location` names, initializes it as backend `location.name`
    /// with its configuration and reads its attributes, as Triton does on a backend's
    /// first use. A python-based backend is the python backend's library initialized
    /// once more under its own name, with its own folder as artifacts directory.
    pub(crate) fn load(
        location: &BackendLocation,
        settings: &HostedSettings,
        server: Arc<ServerSlot>,
    ) -> Result<Self> {
        let name = location.name.as_str();
        let path = &location.library;
        let library = BackendLibrary::open(name, path)?;
        let backend = Box::new(TRITONBACKEND_Backend {
            name: c_string(name)?,
            directory: c_string(&location.directory.to_string_lossy())?,
            config: TRITONSERVER_Message::from_value(&cmdline_config(
                location.config_name(),
                &settings.directory,
                settings.strict_model_config,
                &settings.config,
            )),
            state: AtomicPtr::new(std::ptr::null_mut()),
            execution_policy: AtomicU32::new(0),
            memory_manager: TRITONBACKEND_MemoryManager::default(),
            library,
            server,
            auto_complete: !settings.strict_model_config,
        });
        let initialize = backend.library.initialize;
        let attributes = backend.library.attributes;
        // Built first: a backend whose initialize fails is finalized all the same when
        // the handle drops, as Triton's backend destructor does.
        let handle = Arc::new(BackendHandle {
            backend,
            pending: PendingModels::default(),
        });
        if let Some(initialize) = initialize {
            // SAFETY: the library's entry point with its backend object, which lives in
            // the box for as long as the library is loaded.
            callee_result(unsafe { initialize(handle.pointer()) })
                .map_err(|e| e.prefixed(&format!("failed to initialize backend '{name}': ")))?;
        }
        let mut found = TRITONBACKEND_BackendAttribute::default();
        if let Some(attributes) = attributes {
            // SAFETY: the library's entry point with its backend and an attribute object
            // that lives for the call.
            callee_result(unsafe { attributes(handle.pointer(), &mut found) })
                .map_err(|e| e.prefixed(&format!("backend '{name}' attributes: ")))?;
            tracing::debug!(backend = name, ?found, "backend attributes");
        }
        if location.python_based {
            tracing::info!(
                "loaded python-based backend '{name}' from {} with {}",
                location.directory.display(),
                path.display()
            );
        } else {
            tracing::info!("loaded backend '{name}' from {}", path.display());
        }
        Ok(Self {
            handle,
            attributes: found,
        })
    }
}

fn c_string(text: &str) -> Result<CString> {
    CString::new(text).map_err(|_| Error::invalid_arg(format!("'{text}' contains a NUL byte")))
}

impl Backend for HostedBackend {
    fn name(&self) -> &str {
        self.handle.object().name()
    }

    /// Backend libraries find their own files in the version directory.
    fn default_model_filename(&self) -> &'static str {
        ""
    }

    fn model_filename(&self, _config: &ModelConfig) -> String {
        String::new()
    }

    /// Only used when a model names it.
    fn detected_by_file(&self) -> bool {
        false
    }

    fn preferred_instance_groups(&self) -> Vec<ModelInstanceGroup> {
        self.attributes.preferred_groups.clone()
    }

    /// Triton's backends read inputs where they are, GPU memory included (a GPU instance
    /// gets a CUDA shared-memory input in place).
    fn reads_gpu_inputs(&self) -> bool {
        true
    }

    /// Triton's backends auto-complete inside `TRITONBACKEND_ModelInitialize`: the
    /// model is initialized now and kept for the load that follows.
    fn autocomplete(&self, config: &mut ModelConfig, version_dir: &Path) -> Result<()> {
        if !self.handle.object().auto_complete {
            return Ok(());
        }
        HostedModel::autocomplete(&self.handle, config, version_dir)
    }

    fn load_model(
        &self,
        spec: Arc<ModelSpec>,
        version_dir: &Path,
    ) -> Result<Box<dyn ModelBackend>> {
        Ok(Box::new(HostedModel::load(
            &self.handle,
            spec,
            version_dir,
        )?))
    }
}

/// `TRITONBACKEND_ApiVersion`: the API version this server implements.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ApiVersion(major: *mut u32, minor: *mut u32) -> ErrorPtr {
    ffi::status(|| {
        put(major, API_VERSION.0, "major")?;
        put(minor, API_VERSION.1, "minor")
    })
}

/// `TRITONBACKEND_BackendName`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendName(
    backend: *mut TRITONBACKEND_Backend,
    name: *mut *const c_char,
) -> ErrorPtr {
    with_backend(backend, |b| put(name, b.name.as_ptr(), "name"))
}

/// `TRITONBACKEND_BackendConfig`: the configuration message, owned by the backend object.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendConfig(
    backend: *mut TRITONBACKEND_Backend,
    backend_config: *mut *const TRITONSERVER_Message,
) -> ErrorPtr {
    with_backend(backend, |b| {
        put(backend_config, &raw const b.config, "backend_config")
    })
}

/// `TRITONBACKEND_BackendExecutionPolicy`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendExecutionPolicy(
    backend: *mut TRITONBACKEND_Backend,
    policy: *mut u32,
) -> ErrorPtr {
    with_backend(backend, |b| {
        put(policy, b.execution_policy.load(Ordering::Relaxed), "policy")
    })
}

/// `TRITONBACKEND_BackendSetExecutionPolicy`: recorded; every instance runs on its own
/// thread, which satisfies both policies.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendSetExecutionPolicy(
    backend: *mut TRITONBACKEND_Backend,
    policy: u32,
) -> ErrorPtr {
    with_backend(backend, |b| {
        if policy > 1 {
            return Err(invalid_arg(format!("unknown execution policy {policy}")));
        }
        b.execution_policy.store(policy, Ordering::Relaxed);
        Ok(())
    })
}

/// `TRITONBACKEND_BackendArtifacts`: the backend's directory.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendArtifacts(
    backend: *mut TRITONBACKEND_Backend,
    artifact_type: *mut u32,
    location: *mut *const c_char,
) -> ErrorPtr {
    with_backend(backend, |b| {
        put(artifact_type, ARTIFACT_FILESYSTEM, "artifact_type")?;
        put(location, b.directory.as_ptr(), "location")
    })
}

/// `TRITONBACKEND_BackendMemoryManager`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendMemoryManager(
    backend: *mut TRITONBACKEND_Backend,
    manager: *mut *mut TRITONBACKEND_MemoryManager,
) -> ErrorPtr {
    with_backend(backend, |b| {
        put(manager, (&raw const b.memory_manager).cast_mut(), "manager")
    })
}

/// `TRITONBACKEND_BackendState`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendState(
    backend: *mut TRITONBACKEND_Backend,
    state: *mut *mut c_void,
) -> ErrorPtr {
    with_backend(backend, |b| {
        put(state, b.state.load(Ordering::Acquire), "state")
    })
}

/// `TRITONBACKEND_BackendSetState`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendSetState(
    backend: *mut TRITONBACKEND_Backend,
    state: *mut c_void,
) -> ErrorPtr {
    with_backend(backend, |b| {
        b.state.store(state, Ordering::Release);
        Ok(())
    })
}

/// `TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup`: a preferred group, after
/// those added before (`device_ids`: `id_count` GPU ids, or null for none).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(
    attributes: *mut TRITONBACKEND_BackendAttribute,
    kind: u32,
    count: u64,
    device_ids: *const u64,
    id_count: u64,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: the attribute object passed to `GetBackendAttribute`, or null (checked).
        let attributes = unsafe { ffi::reference_mut(attributes, "backend_attributes") }?;
        let kind = instance_group_kind_of(kind)
            .ok_or_else(|| invalid_arg(format!("unknown instance group kind {kind}")))?;
        let ids: &[u64] = match (device_ids.is_null(), usize::try_from(id_count)) {
            (_, Ok(0)) => &[],
            (true, _) => return Err(invalid_arg("device_ids must not be null")),
            (false, Ok(len)) => {
                // SAFETY: the backend passes `id_count` readable ids at `device_ids`.
                unsafe { std::slice::from_raw_parts(device_ids, len) }
            }
            (false, Err(_)) => return Err(invalid_arg(format!("{id_count} device ids"))),
        };
        let gpus = ids
            .iter()
            .map(|&id| i32::try_from(id).map_err(|_| invalid_arg(format!("GPU id {id}"))))
            .collect::<Result<Vec<_>, ErrorPtr>>()?;
        attributes.preferred_groups.push(ModelInstanceGroup {
            kind: kind as i32,
            count: i32::try_from(count).unwrap_or(i32::MAX),
            gpus,
            ..Default::default()
        });
        Ok(())
    })
}

/// `TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading`: recorded.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(
    attributes: *mut TRITONBACKEND_BackendAttribute,
    enabled: bool,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: the attribute object passed to `GetBackendAttribute`, or null (checked).
        let attributes = unsafe { ffi::reference_mut(attributes, "backend_attributes") }?;
        attributes.parallel_instance_loading = enabled;
        Ok(())
    })
}

/// Runs `body` on the object behind `backend` (checked for null).
fn with_backend(
    backend: *mut TRITONBACKEND_Backend,
    body: impl FnOnce(&TRITONBACKEND_Backend) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: a backend object handed out by this module, or null (checked).
    unsafe { ffi::with(backend, "backend", body) }
}
