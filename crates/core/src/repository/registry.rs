//! The backends models are loaded with: the native ones registered by name, and, for any
//! other name, a loader of Triton backend libraries, which resolves each model's library
//! as Triton does (the model's folders, then `<backend-directory>/<name>/`, then a
//! python-based backend's `model.py`) and loads each library once per name, shared by its
//! models as in Triton.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{Backend, BackendLoader, ModelSite};
use crate::config::ModelConfig;
use crate::error::{Error, Result};

/// Backends by the name used in `config.pbtxt`.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    native: HashMap<String, Arc<dyn Backend>>,
    // Shared by clones; keeps what it loaded, so a library is loaded once per server.
    loader: Option<Arc<dyn BackendLoader>>,
}

impl BackendRegistry {
    /// An empty registry: no native backend, no loader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a native backend under `name`, replacing one of the same name.
    pub fn insert(&mut self, name: impl Into<String>, backend: Arc<dyn Backend>) {
        self.native.insert(name.into(), backend);
    }

    /// Registers several native backends.
    pub fn extend(&mut self, backends: impl IntoIterator<Item = (String, Arc<dyn Backend>)>) {
        self.native.extend(backends);
    }

    /// The native backends, by name.
    pub fn native(&self) -> impl Iterator<Item = (&String, &Arc<dyn Backend>)> {
        self.native.iter()
    }

    /// Serves names with no native backend through `loader`.
    pub fn set_loader(&mut self, loader: Arc<dyn BackendLoader>) {
        self.loader = Some(loader);
    }

    /// The backend `config.backend` names for the model at `site`: native, or found by
    /// the loader (which may complete `config`, see [`BackendLoader::load`]). Triton's
    /// message when there is none.
    pub fn get(&self, site: &ModelSite<'_>, config: &mut ModelConfig) -> Result<Arc<dyn Backend>> {
        if let Some(backend) = self.native.get(&config.backend) {
            return Ok(backend.clone());
        }
        let Some(loader) = &self.loader else {
            return Err(Error::invalid_arg(format!(
                "unable to find backend library for backend '{}', try specifying runtime on the model configuration.",
                config.backend
            )));
        };
        loader.load(site, config)
    }
}
