//! Nereid's core: everything between the protocol frontends and the backends.
//!
//! - [`config`]: `config.pbtxt` parsing, Triton's defaults and validation.
//! - [`repository`]: model directories, version policy, load/unload and the model table.
//! - [`scheduler`]: how requests reach instance worker threads.
//! - [`cache`]: the response cache (local and Redis).
//! - [`ensemble`]: ensembles, steps on other models run as a data-flow graph.
//! - [`backend`]: the contract backends implement; [`batch`] gathers and scatters tensors.
//! - [`server`]: the facade both frontends call.

pub mod backend;
pub mod batch;
pub mod cache;
pub mod config;
mod datatype;
pub mod ensemble;
pub mod error;
pub mod loaded;
mod metrics;
pub mod model;
pub mod repository;
pub mod request;
pub mod scheduler;
pub mod server;
pub mod shm;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod validate;

pub use datatype::DataType;
pub use error::{Error, ErrorKind, Result};
pub use repository::{ControlMode, ModelRepository, RepositoryOptions};
pub use server::Server;
