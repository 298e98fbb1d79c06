//! The model repository: finding models on disk, choosing versions, loading them through
//! their backend, and the table of model states that requests and the repository
//! extension read. Ensembles load their composing models first and take their
//! dependents' rules into unload.

mod ensembles;
mod loader;
mod manager;
mod overrides;
mod record;
mod registry;
mod scan;
mod storage;
mod version_policy;

pub use loader::LoadSettings;
pub use manager::{ControlMode, IndexEntry, ModelRepository, RepositoryOptions};
pub use overrides::{LoadRequest, FILE_PREFIX};
pub use record::ModelState;
pub use registry::BackendRegistry;
pub use storage::StorageLimits;
