//! TRITONCACHE: response caches in shared libraries built against Triton's
//! `tritoncache.h`. This module loads them and serves them as core stores; which store a
//! cache configuration means (built in or a library) is decided by
//! `nereid_embed::caches`, which calls [`CacheLibraries`].
//!
//! - [`entry`], [`allocator`]: the functions a plugin calls (`TRITONCACHE_CacheEntry*`,
//!   `TRITONCACHE_Copy`, `TRITONCACHE_ApiVersion`);
//! - [`library`]: loading a plugin and calling it;
//! - [`store`]: a plugin as a [`CacheStore`].

pub mod allocator;
pub mod entry;
pub mod library;
pub mod store;

use std::path::Path;
use std::sync::Arc;

use nereid_core::cache::{CacheConfig, CacheLoader, CacheStore};
use nereid_core::Result;

use library::CacheLibrary;
use store::PluginStore;

/// Opens TRITONCACHE libraries as stores: the loader the binary and the C ABI give
/// `nereid_embed::caches::open_store` (in `CacheKinds::libraries`).
#[derive(Debug, Default, Clone, Copy)]
pub struct CacheLibraries;

impl CacheLoader for CacheLibraries {
    fn load(&self, path: &Path, config: &CacheConfig) -> Result<Arc<dyn CacheStore>> {
        let library = CacheLibrary::load(&config.name, path, &config.to_json())?;
        Ok(Arc::new(PluginStore::new(config.name.clone(), library)))
    }
}

#[cfg(test)]
mod tests;
