//! The one trait every place that keeps cached responses implements: the in-process LRU
//! ([`super::local`]), a Redis server (crate `nereid-cache-redis`) and TRITONCACHE
//! libraries (crate `nereid-triton-abi`). What Nereid promises beyond Triton — full-key
//! comparison, every output stored, no cached errors, one execution for identical
//! concurrent misses — holds over each of them: the last two live in
//! [`super::ResponseCache`], the first in each store.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::config::CacheConfig;
use super::key::CacheKey;
use super::stats::CacheSnapshot;
use super::CachedOutputs;
use crate::error::Result;

/// A place to keep the outputs of successful executions.
pub trait CacheStore: Send + Sync {
    /// The outputs stored under `key`, or `None`. The store compares the whole key, not
    /// only a hash of it, so colliding requests never get each other's answers. A store
    /// that cannot be reached answers `None` (the request is computed instead).
    fn lookup<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Option<CachedOutputs>>;

    /// [`Self::lookup`]'s answer when the store has it at once (an in-process store), or
    /// `None` to await the lookup: spares a cache hit the boxed future.
    fn lookup_now(&self, _key: &CacheKey) -> Option<Option<CachedOutputs>> {
        None
    }

    /// Stores `outputs` (always every output of a successful execution) under `key`. An
    /// error means the response was not stored; the request still succeeds.
    fn insert<'a>(
        &'a self,
        key: &'a CacheKey,
        outputs: &'a CachedOutputs,
    ) -> BoxFuture<'a, Result<()>>;

    /// Starts background work (connecting to a server); called once inside the runtime.
    fn start(&self) {}

    /// The cache-wide counters behind the `nv_cache_*` metrics, for stores that keep them.
    fn snapshot(&self) -> Option<CacheSnapshot> {
        None
    }

    /// What the store is, for the start-up log line ("local, 1048576 bytes").
    fn describe(&self) -> String;
}

/// Opens the response-cache stores that live in shared libraries (Triton's TRITONCACHE
/// plugins). The crate that can load them implements it; the wiring crate, which decides
/// which store a `--cache-config` means, calls it without depending on that crate (as
/// [`crate::backend::BackendLoader`] does for backend libraries).
pub trait CacheLoader: Send + Sync {
    /// The store kept by the library at `path`, initialized with `config`; an error names
    /// the library and fails start-up.
    fn load(&self, path: &Path, config: &CacheConfig) -> Result<Arc<dyn CacheStore>>;
}
