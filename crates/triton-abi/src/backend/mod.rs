//! The server side of Triton's `tritonbackend.h` (API 1.19): Nereid hosts Triton backend
//! libraries unchanged. A model whose `backend` has no native implementation is served by
//! the library Triton would find for it ([`resolve`]: `libtriton_<backend>.so` or its
//! `runtime` in the model's folders or `<backend-directory>/<backend>/`, else a
//! python-based backend's `<backend-directory>/<backend>/model.py` through the python
//! backend's library), wrapped in the core's backend traits, so every scheduler, the
//! response cache and ensembles serve it as they serve ONNX models. The objects a backend
//! sees (backend, model, instance, request, response, factory) are boxes owned here and
//! handed out as opaque pointers; every call checks its pointers, and every failure is a
//! `TRITONSERVER_Error`.
//!
//! Imports go one way, top to bottom: [`loader`] (the core's `BackendLoader`) and
//! [`batch_strategy`] (its `BatchStrategyLoader`, custom batching libraries) →
//! [`resolve`] (which library serves a model) and [`hosted`] → [`model`] → [`instance`] →
//! `objects` (the ABI objects and the library's entry points) → [`request`],
//! [`response`] → [`output`], [`response_stats`], `exchange`, `single_buffer`, [`memory`]. The server
//! handle backends get for BLS is set by `inprocess::start`, which sits above this folder.

pub mod batch_strategy;
mod elf;
mod exchange;
pub mod hosted;
pub mod instance;
pub mod loader;
pub mod memory;
pub mod model;
mod objects;
pub mod output;
pub mod output_query;
pub mod request;
pub mod resolve;
pub mod response;
pub mod response_stats;
mod single_buffer;
mod soname;

pub use batch_strategy::BatchLibraries;
pub use hosted::HostedSettings;
pub use loader::HostedBackends;
pub use memory::TRITONBACKEND_MemoryManager;
pub use objects::{
    TRITONBACKEND_Backend, TRITONBACKEND_BackendAttribute, TRITONBACKEND_Model,
    TRITONBACKEND_ModelInstance,
};
pub use output::TRITONBACKEND_Output;
pub use request::{TRITONBACKEND_Input, TRITONBACKEND_Request};
pub use response::{TRITONBACKEND_Response, TRITONBACKEND_ResponseFactory, TRITONBACKEND_State};
