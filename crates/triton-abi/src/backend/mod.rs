//! The server side of Triton's `tritonbackend.h` (API 1.19): Nereid hosts Triton backend
//! libraries unchanged. A model whose `backend` has no native implementation is served by
//! `<backend-directory>/<backend>/libtriton_<backend>.so`, wrapped in the core's backend
//! traits, so every scheduler, the response cache and ensembles serve it as they serve
//! ONNX models. The objects a backend sees (backend, model, instance, request, response,
//! factory) are boxes owned here and handed out as opaque pointers; every call checks
//! its pointers, and every failure is a `TRITONSERVER_Error`.

mod elf;
mod exchange;
pub mod hosted;
pub mod instance;
mod library;
pub mod memory;
pub mod model;
pub mod request;
pub mod response;
mod soname;
pub mod unsupported;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use nereid_core::backend::{Backend, BackendLoader};
use nereid_core::{Result, Server};
use nereid_embed::options::ServerHook;

pub use hosted::{TRITONBACKEND_Backend, TRITONBACKEND_BackendAttribute};
pub use instance::TRITONBACKEND_ModelInstance;
pub use memory::TRITONBACKEND_MemoryManager;
pub use model::TRITONBACKEND_Model;
pub use request::{TRITONBACKEND_Input, TRITONBACKEND_Request};
pub use response::{
    TRITONBACKEND_Output, TRITONBACKEND_Response, TRITONBACKEND_ResponseFactory,
    TRITONBACKEND_State,
};

use crate::inprocess::engine::Engine;
use crate::inprocess::server::TRITONSERVER_Server;

/// tritonserver's `--backend-directory` default.
pub const DEFAULT_BACKEND_DIRECTORY: &str = "/opt/tritonserver/backends";

/// The TRITONBACKEND API version this server implements (`tritonbackend.h` 1.19).
pub const API_VERSION: (u32, u32) = (1, 19);

/// Where backend libraries are found and what they are told.
#[derive(Debug, Clone)]
pub struct HostedSettings {
    /// `--backend-directory`.
    pub directory: PathBuf,
    /// `--backend-config` settings as (backend, key, value); an empty backend name is a
    /// global setting every backend gets.
    pub config: Vec<(String, String, String)>,
    /// `--strict-model-config`: backends are told not to auto-complete.
    pub strict_model_config: bool,
}

/// Loads Triton backend libraries for a server's registry, and gives the backends a
/// `TRITONSERVER_Server` handle on that server once it exists (for BLS requests).
pub struct HostedBackends {
    settings: HostedSettings,
    server: Arc<ServerSlot>,
}

/// The server handle backends get through `TRITONBACKEND_ModelServer`, set once the
/// server exists (before any model loads).
#[derive(Default)]
pub(crate) struct ServerSlot {
    server: OnceLock<Box<TRITONSERVER_Server>>,
}

impl ServerSlot {
    /// The handle, or null before the server exists.
    pub(crate) fn pointer(&self) -> *mut TRITONSERVER_Server {
        self.server.get().map_or(std::ptr::null_mut(), |s| {
            std::ptr::from_ref::<TRITONSERVER_Server>(s).cast_mut()
        })
    }
}

impl HostedBackends {
    /// A loader with `settings`, not yet attached to a server.
    pub fn new(settings: HostedSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            server: Arc::new(ServerSlot::default()),
        })
    }

    /// The hook that attaches the loader to the server being started (see
    /// `nereid_embed::Options::on_server`); it must run inside the server's runtime.
    pub fn server_hook(self: &Arc<Self>) -> ServerHook {
        let slot = self.server.clone();
        Arc::new(move |server: &Arc<Server>| {
            let Ok(handle) = tokio::runtime::Handle::try_current() else {
                tracing::warn!("hosted backends: no runtime to serve BLS requests on");
                return;
            };
            let engine = Engine::attach(server.clone(), handle);
            let _ = slot
                .server
                .set(Box::new(TRITONSERVER_Server::attached(engine)));
        })
    }
}

impl BackendLoader for HostedBackends {
    fn load(&self, name: &str) -> Result<Arc<dyn Backend>> {
        let backend = hosted::HostedBackend::load(name, &self.settings, self.server.clone())?;
        Ok(Arc::new(backend))
    }
}
