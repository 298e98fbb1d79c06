//! Which response-cache store a `--cache-config` (or `TRITONSERVER_SetCacheConfig`)
//! means: the built-in `local` LRU, a store the program builds in (the binary's Redis
//! store), or a TRITONCACHE library in the cache directory, with Triton's precedence.
//! The binary and the C ABI both ask here, so the two cannot disagree; what each can
//! open beyond `local` it passes in as [`CacheKinds`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nereid_core::cache::local::LocalCache;
use nereid_core::cache::{CacheConfig, CacheLoader, CacheStore};
use nereid_core::{Error, Result};

/// Where tritonserver looks for cache libraries without `--cache-directory`.
pub const DEFAULT_CACHE_DIRECTORY: &str = "/opt/tritonserver/caches";

/// Opens a built-in store from its configuration.
pub type StoreOpener = fn(&CacheConfig) -> Result<Arc<dyn CacheStore>>;

/// The stores a program can open besides the built-in `local` cache.
#[derive(Clone, Default)]
pub struct CacheKinds {
    /// The `redis` store built in (the binary passes `nereid-cache-redis`'s); `None`
    /// looks `redis` up as a library in the cache directory, as Triton does.
    pub redis: Option<StoreOpener>,
    /// Opens TRITONCACHE libraries; `None`: this program loads none, and a cache that
    /// names one is refused.
    pub libraries: Option<Arc<dyn CacheLoader>>,
}

/// `<directory>/<name>/libtritoncache_<name>.so`, Triton's layout.
pub fn library_path(directory: &Path, name: &str) -> PathBuf {
    directory
        .join(name)
        .join(format!("libtritoncache_{name}.so"))
}

/// The store `config` asks for: `local` (and `redis` where `kinds` builds it in) unless
/// `directory` (an explicit `--cache-directory`) holds a library of that name, as in
/// Triton; any other name is a library in `directory` or [`DEFAULT_CACHE_DIRECTORY`].
pub fn open_store(
    config: &CacheConfig,
    directory: Option<&Path>,
    kinds: &CacheKinds,
) -> Result<Arc<dyn CacheStore>> {
    let name = config.name.as_str();
    let library_given = directory.is_some_and(|d| library_path(d, name).exists());
    let built_in = match name {
        "local" => Some(LocalCache::open as StoreOpener),
        "redis" => kinds.redis,
        _ => None,
    };
    if let Some(open) = built_in.filter(|_| !library_given) {
        return open(config);
    }
    let directory = directory.unwrap_or(Path::new(DEFAULT_CACHE_DIRECTORY));
    let path = library_path(directory, name);
    if !path.exists() {
        return Err(Error::invalid_arg(format!(
            "unable to find 'libtritoncache_{name}.so' for cache. Searched: {}",
            directory.display()
        )));
    }
    let Some(libraries) = &kinds.libraries else {
        return Err(Error::invalid_arg(format!(
            "cache '{name}' is a library ({}), and this program loads no cache libraries",
            path.display()
        )));
    };
    libraries.load(&path, config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, json: &str) -> CacheConfig {
        CacheConfig::from_json(name, json).expect("a valid cache config")
    }

    #[test]
    fn local_is_built_in_and_redis_only_where_the_program_builds_it_in() {
        let kinds = CacheKinds::default();
        let store = open_store(&config("local", r#"{"size": "1024"}"#), None, &kinds);
        assert!(store.expect("local").describe().starts_with("local"));
        let dir = tempfile::tempdir().expect("temp dir");
        let redis = config("redis", r#"{"host": "localhost"}"#);
        let error = open_store(&redis, Some(dir.path()), &kinds)
            .err()
            .expect("looked up as a library, as in Triton");
        assert!(
            error
                .message()
                .starts_with("unable to find 'libtritoncache_redis.so' for cache."),
            "{error}"
        );
        fn program_redis(_: &CacheConfig) -> Result<Arc<dyn CacheStore>> {
            Err(Error::internal("the program's redis opener"))
        }
        let built_in = CacheKinds {
            redis: Some(program_redis),
            ..CacheKinds::default()
        };
        let opened = open_store(&redis, Some(dir.path()), &built_in).err();
        assert_eq!(
            opened.expect("the opener's answer").message(),
            "the program's redis opener"
        );
    }

    #[test]
    fn a_library_without_a_loader_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = library_path(dir.path(), "memory");
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, b"").expect("write");
        let kinds = CacheKinds::default();
        let error = open_store(&config("memory", "{}"), Some(dir.path()), &kinds)
            .err()
            .expect("refused");
        assert!(
            error.message().contains("loads no cache libraries"),
            "{error}"
        );
    }
}
