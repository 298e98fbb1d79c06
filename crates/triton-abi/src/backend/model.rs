//! [`HostedModel`], the core model backend over one initialized `TRITONBACKEND_Model`
//! that creates its instances, and the `TRITONBACKEND_Model*` calls a library makes on
//! it (name, version, repository directory, configuration as JSON, state, the server
//! handle for BLS).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;

use nereid_core::backend::{InstanceBackend, InstanceConfig, ModelBackend};
use nereid_core::config::{config_from_json, config_to_json, ModelConfig};
use nereid_core::model::ModelSpec;
use nereid_core::{Error, Result};
use parking_lot::Mutex;

use super::instance::HostedInstance;
use super::objects::{
    BackendHandle, ModelHandle, TRITONBACKEND_Backend, TRITONBACKEND_Model, ARTIFACT_FILESYSTEM,
};
use crate::buffer_attributes::TRITONSERVER_BufferAttributes;
use crate::error::{callee_result, invalid_arg, new_error, ErrorPtr, TRITONSERVER_Error_Code};
use crate::ffi::{self, put};
use crate::inprocess::message::TRITONSERVER_Message;
use crate::inprocess::server::TRITONSERVER_Server;

impl ModelHandle {
    /// Creates the model object and runs `TRITONBACKEND_ModelInitialize`.
    pub(crate) fn initialize(
        backend: &Arc<BackendHandle>,
        config: &ModelConfig,
        name: &str,
        version: i64,
        model_dir: &Path,
        auto_complete: bool,
    ) -> Result<Arc<Self>> {
        let text = |t: &str| {
            CString::new(t).map_err(|_| Error::invalid_arg(format!("'{t}' contains a NUL byte")))
        };
        let model = Box::new(TRITONBACKEND_Model {
            name: text(name)?,
            version: u64::try_from(version).unwrap_or_default(),
            repository: text(&model_dir.to_string_lossy())?,
            config: Mutex::new(config_to_json(config)),
            auto_complete,
            initializing: AtomicBool::new(true),
            completed: Mutex::new(None),
            state: AtomicPtr::new(std::ptr::null_mut()),
            backend: Some(backend.clone()),
        });
        // Built first: a model whose initialize fails is finalized all the same when the
        // handle drops, as Triton's model destructor does.
        let handle = Self { model };
        if let Some(initialize) = backend.object().library.model_initialize {
            // SAFETY: the library's entry point with a model object that lives in its box
            // until finalized.
            callee_result(unsafe { initialize(handle.pointer()) }).map_err(|e| {
                e.prefixed(&format!(
                    "failed to load model '{name}' (backend '{}'): ",
                    backend.object().name()
                ))
            })?;
        }
        handle.model.initializing.store(false, Ordering::Release);
        Ok(Arc::new(handle))
    }
}

/// A hosted model version, as the core sees it.
pub struct HostedModel {
    handle: Arc<ModelHandle>,
    spec: Arc<ModelSpec>,
}

/// The version a version directory holds, and the model directory above it.
fn version_of(version_dir: &Path) -> Result<(i64, &Path)> {
    let dir = version_dir.components().as_path();
    let version = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            Error::invalid_arg(format!("{} is not a version directory", dir.display()))
        })?;
    let model_dir = dir.parent().unwrap_or(dir);
    Ok((version, model_dir))
}

impl HostedModel {
    /// Initializes the model in `version_dir` allowing auto-completion, takes the
    /// configuration the backend set (if any) into `config`, and keeps the model for
    /// its load.
    pub(crate) fn autocomplete(
        backend: &Arc<BackendHandle>,
        config: &mut ModelConfig,
        version_dir: &Path,
    ) -> Result<()> {
        let (version, model_dir) = version_of(version_dir)?;
        if config.name.is_empty() {
            // Triton names the model after its directory before the backend sees it.
            config.name = model_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        let name = config.name.clone();
        let handle = ModelHandle::initialize(backend, config, &name, version, model_dir, true)?;
        if let Some(json) = handle.model.completed.lock().take() {
            let mut completed = config_from_json(&json).map_err(|e| {
                e.prefixed(&format!(
                    "model '{name}': the configuration its backend set: "
                ))
            })?;
            if completed.name.is_empty() {
                completed.name = name.clone();
            }
            *config = completed;
        }
        backend.pending.0.lock().insert((name, version), handle);
        Ok(())
    }

    /// The model of `spec`: the one auto-completion initialized, now given the
    /// normalized configuration, or one initialized now.
    pub(crate) fn load(
        backend: &Arc<BackendHandle>,
        spec: Arc<ModelSpec>,
        version_dir: &Path,
    ) -> Result<Self> {
        let (version, model_dir) = version_of(version_dir)?;
        let pending = backend
            .pending
            .0
            .lock()
            .remove(&(spec.name.clone(), version));
        let handle = match pending {
            Some(handle) => {
                *handle.model.config.lock() = config_to_json(&spec.config);
                handle
            }
            None => ModelHandle::initialize(
                backend,
                &spec.config,
                &spec.name,
                version,
                model_dir,
                false,
            )?,
        };
        Ok(Self { handle, spec })
    }
}

impl ModelBackend for HostedModel {
    fn create_instance(&self, instance: &InstanceConfig) -> Result<Box<dyn InstanceBackend>> {
        Ok(Box::new(HostedInstance::initialize(
            &self.handle,
            self.spec.clone(),
            instance,
        )?))
    }
}

/// Runs `body` on the model behind `model` (checked for null).
pub(crate) fn with_model(
    model: *mut TRITONBACKEND_Model,
    body: impl FnOnce(&TRITONBACKEND_Model) -> std::result::Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: a model object handed out by this module, or null (checked).
    unsafe { ffi::with(model, "model", body) }
}

/// Triton's refusal of a model configuration version other than 1.
fn config_version_supported(config_version: u32) -> std::result::Result<(), ErrorPtr> {
    if config_version == 1 {
        return Ok(());
    }
    Err(new_error(
        TRITONSERVER_Error_Code::Unsupported,
        format!(
            "model configuration version {config_version} not supported, supported versions are: 1"
        ),
    ))
}

/// `TRITONBACKEND_ModelName`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelName(
    model: *mut TRITONBACKEND_Model,
    name: *mut *const c_char,
) -> ErrorPtr {
    with_model(model, |m| put(name, m.name.as_ptr(), "name"))
}

/// `TRITONBACKEND_ModelVersion`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelVersion(
    model: *mut TRITONBACKEND_Model,
    version: *mut u64,
) -> ErrorPtr {
    with_model(model, |m| put(version, m.version, "version"))
}

/// `TRITONBACKEND_ModelRepository`: the model's directory on the local filesystem.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelRepository(
    model: *mut TRITONBACKEND_Model,
    artifact_type: *mut u32,
    location: *mut *const c_char,
) -> ErrorPtr {
    with_model(model, |m| {
        put(artifact_type, ARTIFACT_FILESYSTEM, "artifact_type")?;
        put(location, m.repository.as_ptr(), "location")
    })
}

/// `TRITONBACKEND_ModelConfig`: a new message the caller owns (version 1 only).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelConfig(
    model: *mut TRITONBACKEND_Model,
    config_version: u32,
    model_config: *mut *mut TRITONSERVER_Message,
) -> ErrorPtr {
    with_model(model, |m| {
        config_version_supported(config_version)?;
        let config = m.config.lock().clone();
        // SAFETY: an out-parameter from the caller, checked for null by `give`.
        unsafe { TRITONSERVER_Message::give(model_config, &config) }
    })
}

/// `TRITONBACKEND_ModelAutoCompleteConfig`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelAutoCompleteConfig(
    model: *mut TRITONBACKEND_Model,
    auto_complete_config: *mut bool,
) -> ErrorPtr {
    with_model(model, |m| {
        put(
            auto_complete_config,
            m.auto_complete,
            "auto_complete_config",
        )
    })
}

/// `TRITONBACKEND_ModelSetConfig`: only during `ModelInitialize`; the loader then
/// normalizes what the backend completed. The caller keeps the message.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelSetConfig(
    model: *mut TRITONBACKEND_Model,
    config_version: u32,
    model_config: *mut TRITONSERVER_Message,
) -> ErrorPtr {
    with_model(model, |m| {
        config_version_supported(config_version)?;
        if !m.initializing.load(Ordering::Acquire) {
            return Err(new_error(
                TRITONSERVER_Error_Code::Internal,
                "TRITONBACKEND_ModelSetConfig can only be called during TRITONBACKEND_ModelInitialize",
            ));
        }
        // SAFETY: a message from `TRITONSERVER_MessageNewFromSerializedJson`, or null.
        let message = unsafe { ffi::reference(model_config, "model_config") }?;
        let text = std::str::from_utf8(message.json())
            .map_err(|_| invalid_arg("model configuration is not UTF-8"))?;
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| invalid_arg(format!("failed to parse the model configuration: {e}")))?;
        *m.config.lock() = value;
        *m.completed.lock() = Some(text.to_string());
        Ok(())
    })
}

/// `TRITONBACKEND_ModelServer`: the server, for BLS requests and repository calls.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelServer(
    model: *mut TRITONBACKEND_Model,
    server: *mut *mut TRITONSERVER_Server,
) -> ErrorPtr {
    with_model(model, |m| {
        let pointer = m
            .backend
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| b.object().server.pointer());
        if pointer.is_null() {
            return Err(new_error(
                TRITONSERVER_Error_Code::Unavailable,
                "the server is not available to backends yet",
            ));
        }
        put(server, pointer, "server")
    })
}

/// `TRITONBACKEND_ModelBackend`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelBackend(
    model: *mut TRITONBACKEND_Model,
    backend: *mut *mut TRITONBACKEND_Backend,
) -> ErrorPtr {
    with_model(model, |m| match &m.backend {
        Some(library) => put(backend, library.pointer(), "backend"),
        None => Err(new_error(
            TRITONSERVER_Error_Code::Unsupported,
            format!(
                "model '{}' is served natively, without a backend library",
                m.name()
            ),
        )),
    })
}

/// `TRITONBACKEND_ModelState`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelState(
    model: *mut TRITONBACKEND_Model,
    state: *mut *mut c_void,
) -> ErrorPtr {
    with_model(model, |m| {
        put(state, m.state.load(Ordering::Acquire), "state")
    })
}

/// `TRITONBACKEND_ModelSetState`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelSetState(
    model: *mut TRITONBACKEND_Model,
    state: *mut c_void,
) -> ErrorPtr {
    with_model(model, |m| {
        m.state.store(state, Ordering::Release);
        Ok(())
    })
}

/// `TRITONBACKEND_ModelReportMemoryUsage`: accepted, as for instances.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelReportMemoryUsage(
    model: *mut TRITONBACKEND_Model,
    _usage: *mut *mut TRITONSERVER_BufferAttributes,
    _usage_size: u32,
) -> ErrorPtr {
    with_model(model, |_| Ok(()))
}
