//! The backends models are loaded with: the native ones registered by name, and, for any
//! other name, a loader of Triton backend libraries (`<backend-directory>/<name>/
//! libtriton_<name>.so`), each library loaded once and shared by its models as in Triton.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::{Backend, BackendLoader};
use crate::error::{Error, Result};

/// Backends by the name used in `config.pbtxt`.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    native: HashMap<String, Arc<dyn Backend>>,
    loader: Option<Arc<dyn BackendLoader>>,
    // Loaded on first use; shared by clones, so a backend is loaded once per server.
    loaded: Arc<Mutex<HashMap<String, Arc<dyn Backend>>>>,
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

    /// The backend called `name`: native, already loaded, or loaded now. Triton's message
    /// when there is none.
    pub fn get(&self, name: &str) -> Result<Arc<dyn Backend>> {
        if let Some(backend) = self.native.get(name) {
            return Ok(backend.clone());
        }
        let Some(loader) = &self.loader else {
            return Err(Error::invalid_arg(format!(
                "unable to find backend library for backend '{name}', try specifying runtime on the model configuration."
            )));
        };
        // Held while loading, so concurrent model loads do not load a library twice.
        let mut loaded = self.loaded.lock();
        if let Some(backend) = loaded.get(name) {
            return Ok(backend.clone());
        }
        let backend = loader.load(name)?;
        loaded.insert(name.to_string(), backend.clone());
        Ok(backend)
    }
}
