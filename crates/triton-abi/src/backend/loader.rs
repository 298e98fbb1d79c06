//! [`HostedBackends`]: the core's `BackendLoader` for Triton backend libraries. It
//! loads `<backend-directory>/<name>/libtriton_<name>.so` on a model's first use, and
//! holds the `TRITONSERVER_Server` handle backends get for BLS requests once the server
//! exists (set by whoever starts the server: `inprocess::start`).

use std::sync::Arc;

use nereid_core::backend::{Backend, BackendLoader};
use nereid_core::Result;

use super::hosted::{HostedBackend, HostedSettings};
use super::objects::ServerSlot;
use crate::inprocess::server::TRITONSERVER_Server;

/// Loads Triton backend libraries for a server's registry, and gives the backends a
/// `TRITONSERVER_Server` handle on that server once it exists (for BLS requests).
pub struct HostedBackends {
    settings: HostedSettings,
    server: Arc<ServerSlot>,
}

impl HostedBackends {
    /// A loader with `settings`, not yet attached to a server.
    pub fn new(settings: HostedSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            server: Arc::new(ServerSlot::default()),
        })
    }

    /// Gives the backends `server`, the handle `TRITONBACKEND_ModelServer` answers;
    /// once, before any model loads (a second call is ignored).
    pub(crate) fn attach(&self, server: TRITONSERVER_Server) {
        let _ = self.server.server.set(Box::new(server));
    }
}

impl BackendLoader for HostedBackends {
    fn load(&self, name: &str) -> Result<Arc<dyn Backend>> {
        let backend = HostedBackend::load(name, &self.settings, self.server.clone())?;
        Ok(Arc::new(backend))
    }
}
