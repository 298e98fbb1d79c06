//! One backend library: `dlopen` with Triton's flags and its entry points. Only
//! `TRITONBACKEND_ModelInstanceExecute` is required, as in Triton (core
//! `src/backend_manager.cc`); the others are optional.

use std::path::Path;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use nereid_core::{Error, Result};

use super::hosted::{TRITONBACKEND_Backend, TRITONBACKEND_BackendAttribute};
use super::instance::TRITONBACKEND_ModelInstance;
use super::model::TRITONBACKEND_Model;
use super::request::TRITONBACKEND_Request;
use crate::dl::{dlerror_text, entry_point, optional_entry_point};
use crate::error::ErrorPtr;

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
        let library = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
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
