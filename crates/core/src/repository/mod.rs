//! The model repository: finding models on disk, choosing versions, loading them through
//! their backend, and the table of model states that requests and the repository
//! extension read. Ensembles load their composing models first and take their
//! dependents' rules into unload. tritonserver's repository flags ([`RepositoryFlags`])
//! choose the configuration file, the load parallelism and retries, namespacing, and
//! where repository agents live; the `checksum` agent runs before a model loads.
//!
//! `manager.rs` defines [`ModelRepository`] (the table, its reads and storage access);
//! each operation on it is a file of its own above it — `index` (and `status_table`, the
//! start-up table made of it), `load`, `unload`,
//! `poll`, `batch` (start-up and poll loads in parallel), `ensembles`, `namespace`,
//! `registered` — importing the manager and the plain helpers below it (`ids`,
//! `registrations`, `record`, `scan`, `loader`, `backend_fields`, `storage`, `overrides`,
//! `remote`), never
//! one another.

mod agents;
mod backend_fields;
mod batch;
mod ensembles;
mod flags;
#[cfg(test)]
mod fuzz_tests;
mod ids;
mod index;
mod instance_update;
mod load;
mod loader;
mod manager;
mod md5;
mod namespace;
mod overrides;
mod poll;
mod record;
mod registered;
mod registrations;
mod registry;
mod remote;
mod scan;
mod status_table;
mod storage;
mod unload;
mod version_policy;
mod warmup;

pub use agents::CHECKSUM_AGENT;
pub use flags::{RepositoryFlags, DEFAULT_LOAD_THREAD_COUNT, DEFAULT_REPOAGENT_DIRECTORY};
pub use loader::LoadSettings;
pub use manager::{ControlMode, IndexEntry, ModelRepository, RepositoryOptions};
pub use overrides::{LoadRequest, FILE_PREFIX};
pub use record::ModelState;
pub use registry::BackendRegistry;
pub use remote::RemoteRepository;
pub use storage::StorageLimits;
