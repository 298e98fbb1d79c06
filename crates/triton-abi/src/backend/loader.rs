//! [`HostedBackends`]: the core's `BackendLoader` for Triton backend libraries. For each
//! model it finds the library as Triton's core does (see [`super::resolve`]: the model's
//! folders, `<backend-directory>/<name>/`, or a python-based backend's `model.py`),
//! initializes each library once per backend name and shares it, as Triton's backend
//! manager does; and it holds the `TRITONSERVER_Server` handle backends get for BLS
//! requests once the server exists (set by whoever starts the server:
//! `inprocess::start`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use nereid_core::backend::{Backend, BackendLoader, ModelSite};
use nereid_core::config::ModelConfig;
use nereid_core::Result;
use parking_lot::Mutex;

use super::hosted::{HostedBackend, HostedSettings};
use super::objects::ServerSlot;
use super::resolve::resolve;
use crate::inprocess::server::TRITONSERVER_Server;

/// Loads Triton backend libraries for a server's registry, and gives the backends a
/// `TRITONSERVER_Server` handle on that server once it exists (for BLS requests).
pub struct HostedBackends {
    settings: HostedSettings,
    server: Arc<ServerSlot>,
    /// The backends initialized so far, by what Triton's backend manager shares them
    /// under ([`super::resolve::BackendLocation::key`]) and their name; kept for the
    /// server's life. Locked for a whole load, so concurrent model loads do not
    /// initialize a library twice.
    loaded: Mutex<HashMap<(PathBuf, String), Arc<HostedBackend>>>,
}

impl HostedBackends {
    /// A loader with `settings`, not yet attached to a server.
    pub fn new(settings: HostedSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            server: Arc::new(ServerSlot::default()),
            loaded: Mutex::default(),
        })
    }

    /// Gives the backends `server`, the handle `TRITONBACKEND_ModelServer` answers;
    /// once, before any model loads (a second call is ignored).
    pub(crate) fn attach(&self, server: TRITONSERVER_Server) {
        let _ = self.server.server.set(Box::new(server));
    }
}

impl BackendLoader for HostedBackends {
    fn load(&self, site: &ModelSite<'_>, config: &mut ModelConfig) -> Result<Arc<dyn Backend>> {
        let location = resolve(&self.settings.directory, site, config)?;
        let mut loaded = self.loaded.lock();
        let key = (location.key(), location.name.clone());
        if let Some(backend) = loaded.get(&key) {
            return Ok(backend.clone());
        }
        let backend = Arc::new(HostedBackend::load(
            &location,
            &self.settings,
            self.server.clone(),
        )?);
        loaded.insert(key, backend.clone());
        Ok(backend)
    }
}
