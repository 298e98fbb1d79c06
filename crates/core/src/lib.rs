//! Nereid's core: everything between the protocol frontends and the backends. From the
//! top down (each module imports only those below it):
//!
//! - [`server`]: the facade both frontends call.
//! - [`repository`]: model directories, version policy, load/unload and the model table.
//! - [`loaded`]: one servable model version (validation, cache, scheduler or ensemble).
//! - [`ensemble`]: ensembles, steps on other models run as a data-flow graph.
//! - [`scheduler`]: how requests reach instance worker threads, as [`scheduler::Job`]s.
//! - [`rate_limit`]: the rate limiter instances of every model take turns under.
//! - [`cache`]: the response cache (the local store here; the traits Redis and plugin
//!   stores implement and are loaded through).
//! - [`model`]: the typed spec of a loaded version, built once from its configuration.
//! - [`stats`]: statistics, and the record that counts each request's outcome once.
//! - [`validate`] and [`batch`]: request checks; gathering and scattering tensors.
//! - [`backend`]: the contract backends implement.
//! - [`config`]: `config.pbtxt` parsing, Triton's defaults and validation.
//! - [`classification`]: the classification extension (top-k strings, label files); the
//!   facade applies it to responses and model specs hold the labels.
//! - [`trace`]: the trace extension (settings, sampling, Triton's trace files).
//! - [`response_stream`]: the many-response answers of decoupled models.
//! - [`presence`]: whether a request's caller still waits, for backends that ask.
//! - [`request`], [`sequence_flags`], [`shm`], [`error`]: the vocabulary underneath.
//!
//! The crate holds no `unsafe` code: raw shared memory is `nereid-shm`'s, the fuzz
//! targets' allocator `nereid-alloc-track`'s.
#![forbid(unsafe_code)]

pub mod backend;
pub mod batch;
pub mod cache;
pub mod classification;
pub mod config;
pub mod ensemble;
pub mod error;
pub mod header_forward;
pub mod loaded;
pub mod log_line;
pub mod log_settings;
pub mod metrics;
pub mod model;
pub mod output_query;
pub mod presence;
pub mod rate_limit;
pub mod raw_input;
pub mod repository;
pub mod request;
pub mod response_stream;
pub mod restricted;
pub mod scheduler;
pub mod sequence_flags;
pub mod server;
pub mod shm;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod trace;
pub mod validate;

pub use error::{Error, ErrorKind, Result};
pub use nereid_proto::DataType;
pub use repository::{ControlMode, ModelRepository, RepositoryOptions};
pub use server::Server;
