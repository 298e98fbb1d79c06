//! TRITONCACHE: response caches in shared libraries built against Triton's
//! `tritoncache.h`, and the choice between them and the built-in stores.
//!
//! - [`entry`], [`allocator`]: the functions a plugin calls (`TRITONCACHE_CacheEntry*`,
//!   `TRITONCACHE_Copy`, `TRITONCACHE_ApiVersion`);
//! - [`library`]: loading a plugin and calling it;
//! - [`store`]: a plugin as a [`CacheStore`].

pub mod allocator;
pub mod entry;
pub mod library;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_cache_redis::RedisStore;
use nereid_core::cache::local::LocalCache;
use nereid_core::cache::{CacheConfig, CacheStore};
use nereid_core::{Error, Result};

use library::CacheLibrary;
use store::PluginStore;

/// Where tritonserver looks for cache libraries without `--cache-directory`.
pub const DEFAULT_CACHE_DIRECTORY: &str = "/opt/tritonserver/caches";

/// `<directory>/<name>/libtritoncache_<name>.so`, Triton's layout.
pub fn library_path(directory: &Path, name: &str) -> PathBuf {
    directory
        .join(name)
        .join(format!("libtritoncache_{name}.so"))
}

/// The store `config` asks for: `local` and `redis` are built in unless `directory` (an
/// explicit `--cache-directory`) holds a library of that name; any other name is a library
/// in `directory` or [`DEFAULT_CACHE_DIRECTORY`].
pub fn open_store(config: &CacheConfig, directory: Option<&Path>) -> Result<Arc<dyn CacheStore>> {
    let name = config.name.as_str();
    let explicit = directory.map(|d| library_path(d, name));
    match name {
        "local" | "redis" if !explicit.as_deref().is_some_and(Path::exists) => {
            if name == "local" {
                Ok(Arc::new(LocalCache::from_config(config)?))
            } else {
                Ok(Arc::new(RedisStore::from_config(config)?))
            }
        }
        _ => {
            let directory = directory.unwrap_or(Path::new(DEFAULT_CACHE_DIRECTORY));
            let path = library_path(directory, name);
            if !path.exists() {
                return Err(Error::invalid_arg(format!(
                    "unable to find 'libtritoncache_{name}.so' for cache. Searched: {}",
                    directory.display()
                )));
            }
            let library = CacheLibrary::load(name, &path, &config.to_json())?;
            Ok(Arc::new(PluginStore::new(name.to_string(), library)))
        }
    }
}

#[cfg(test)]
mod tests;
