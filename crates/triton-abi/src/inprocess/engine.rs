//! Builds and stops the Nereid server behind a `TRITONSERVER_Server`: the one place that
//! turns server options into a running core, on a tokio runtime the server object owns
//! (C callers have no runtime of their own).
//!
//! Until the `nereid-embed` crate is available here this module assembles the server
//! from the core's pieces the way the `nereid` binary does.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nereid_backend_onnx::{find_library, OnnxBackend, OrtRuntime, StatefulBackend};
use nereid_cache_redis::RedisStore;
use nereid_core::cache::local::LocalCache;
use nereid_core::cache::{CacheConfig, CacheStore, ResponseCache};
use nereid_core::config::NormalizeOptions;
use nereid_core::repository::{BackendRegistry, LoadSettings, StorageLimits};
use nereid_core::server::ServerIdentity;
use nereid_core::{Error, ModelRepository, RepositoryOptions, Result, Server};

use super::options::TRITONSERVER_ServerOptions;

/// A running server and the runtime its tasks run on.
pub struct Engine {
    /// Owns every task of the server; `None` only while [`Drop`] shuts it down.
    runtime: Option<tokio::runtime::Runtime>,
    server: Arc<Server>,
}

impl Engine {
    /// Starts a server as `options` describe: backends, response cache, repository and
    /// start-up models, with Triton's start-up errors.
    pub fn start(options: &TRITONSERVER_ServerOptions) -> Result<Self> {
        if options.repositories.is_empty() {
            return Err(Error::invalid_arg("--model-repository must be specified"));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("nereid")
            .enable_all()
            .build()
            .map_err(|e| Error::internal(format!("failed to start the runtime: {e}")))?;
        let backends = backends(&options.backend_config)?;
        let cache = response_cache(options)?;
        let repository = Arc::new(ModelRepository::new(
            RepositoryOptions {
                roots: options.repositories.clone(),
                control_mode: options.control_mode,
                startup_models: options.startup_models.clone(),
                settings: LoadSettings {
                    strict_model_config: options.strict_model_config,
                    normalize: NormalizeOptions { gpu_count: 0 },
                    cache: cache.clone(),
                },
                storage: StorageLimits::default(),
            },
            backends,
        ));
        let inside = runtime.enter();
        let failures = futures::executor::block_on(async {
            if let Some(cache) = &cache {
                cache.start();
            }
            repository.load_startup_models().await
        })?;
        drop(inside);
        if options.exit_on_error && !failures.is_empty() {
            repository.stop_all();
            // Triton logs each failure and returns only the summary; an in-process caller
            // has no log to read, so the reasons follow it.
            let reasons: Vec<&str> = failures.iter().map(Error::message).collect();
            return Err(Error::internal(format!(
                "failed to load all models: {}",
                reasons.join("; ")
            )));
        }
        let server = Arc::new(Server::new(
            ServerIdentity {
                name: options.server_id.clone(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            },
            repository,
            options.strict_readiness,
        ));
        Ok(Self {
            runtime: Some(runtime),
            server,
        })
    }

    /// The core facade.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime lives until the engine is dropped")
    }

    /// Runs `future` to completion for the synchronous calls, on the calling thread but
    /// inside the server's runtime, so that it also works from a response or release
    /// callback (which run on the runtime's threads, where tokio's own `block_on` panics).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        let _inside = self.runtime().enter();
        futures::executor::block_on(future)
    }

    /// Runs `future` in the background on the server's runtime.
    pub fn spawn(&self, future: impl std::future::Future<Output = ()> + Send + 'static) {
        self.runtime().spawn(future);
    }

    /// A handle on the runtime, for tasks that start more work.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.runtime().handle().clone()
    }

    /// Admits `request` now (inside the runtime, which the core's queues need) and
    /// returns its answer to come.
    pub fn submit(
        &self,
        request: nereid_core::request::InferRequest,
    ) -> nereid_core::request::Answer {
        let _inside = self.runtime().enter();
        self.server.submit(request)
    }

    /// Stops the server: readiness turns false, then the models stop, waiting at most
    /// `timeout` for them.
    pub fn stop(&self, timeout: Duration) {
        self.server.begin_shutdown();
        let repository = self.server.repository().clone();
        let stop = self.runtime().spawn_blocking(move || repository.stop_all());
        // The timer must be created inside the runtime.
        let _ = self.block_on(async { tokio::time::timeout(timeout, stop).await });
    }
}

impl Drop for Engine {
    /// Shuts the runtime down without waiting when dropped on one of its own threads (a
    /// server deleted from a callback), else waits briefly for its tasks.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                runtime.shutdown_timeout(Duration::from_secs(5));
            }
        }
    }
}

/// The built-in backends, with the ONNX Runtime library found as the binary finds it.
fn backends(config: &[(String, String, String)]) -> Result<BackendRegistry> {
    let setting = |key: &str| {
        config
            .iter()
            .rev()
            .find(|(backend, k, _)| backend == "onnxruntime" && k == key)
            .map(|(_, _, v)| v.as_str())
    };
    let default_max_batch_size = match setting("default-max-batch-size") {
        Some(v) => v.parse().map_err(|_| {
            Error::invalid_arg(format!(
                "backend config onnxruntime,default-max-batch-size={v}: not an integer"
            ))
        })?,
        None => 4,
    };
    let mut registry = BackendRegistry::new();
    if let Some(path) = find_library(setting("library-path").map(PathBuf::from).as_deref()) {
        let runtime = ort_runtime(path);
        registry.insert(
            "onnxruntime",
            Arc::new(OnnxBackend::new(runtime.clone(), default_max_batch_size)),
        );
        registry.insert("stateful", Arc::new(StatefulBackend::new(runtime)));
    }
    Ok(registry)
}

/// The process's ONNX Runtime: ORT allows one environment per process, so every server
/// a program creates (one after another, or side by side) shares the first one's. A later
/// server asking for another library gets the one already loaded.
fn ort_runtime(path: PathBuf) -> Arc<OrtRuntime> {
    static RUNTIME: OnceLock<Arc<OrtRuntime>> = OnceLock::new();
    RUNTIME.get_or_init(|| OrtRuntime::new(path)).clone()
}

/// The response cache the options ask for: `SetCacheConfig` or the deprecated
/// `SetResponseCacheByteSize` (a local cache of that size; 0 leaves the cache off).
fn response_cache(options: &TRITONSERVER_ServerOptions) -> Result<Option<Arc<ResponseCache>>> {
    let config = match (&options.cache, options.response_cache_byte_size) {
        (Some((name, json)), _) => CacheConfig::from_json(name, json)?,
        (None, Some(size)) if size > 0 => {
            CacheConfig::from_json("local", &format!("{{\"size\":\"{size}\"}}"))?
        }
        _ => return Ok(None),
    };
    let store: Arc<dyn CacheStore> = match config.name.as_str() {
        "local" => Arc::new(LocalCache::from_config(&config)?),
        "redis" => Arc::new(RedisStore::from_config(&config)?),
        other => {
            return Err(Error::unsupported(format!(
                "cache '{other}' is not supported by Nereid's in-process server: it has the 'local' and 'redis' caches"
            )))
        }
    };
    Ok(Some(Arc::new(ResponseCache::new(store))))
}
