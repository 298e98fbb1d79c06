//! `TRITONSERVER_ServerNew`: the one place that turns `TRITONSERVER_ServerOptions` into a
//! running server, wiring in what this crate supplies — hosted backend libraries and
//! TRITONCACHE plugins — through `nereid_embed`'s choices, as the binary does. It also
//! makes the hook that gives hosted backends their `TRITONSERVER_Server` handle, for the
//! server being started here and for the binary's.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use nereid_core::cache::{CacheConfig, CacheStore};
use nereid_core::{Error, Result, Server};
use nereid_embed::caches::CacheKinds;
use nereid_embed::options::ServerHook;
use nereid_embed::Options;

use super::engine::{Engine, PolledMetrics};
use super::options::TRITONSERVER_ServerOptions;
use super::server::TRITONSERVER_Server;
use crate::backend::{BatchLibraries, HostedBackends, HostedSettings};
use crate::cache::CacheLibraries;
use crate::error::{from_core, invalid_arg, ErrorPtr};
use crate::ffi;

/// tritonserver's exit timeout for a server object nobody set one on.
const DEFAULT_EXIT_TIMEOUT_SECS: u32 = 30;

/// The hook that attaches `backends` to the server being started (see
/// `nereid_embed::Options::on_server`); it must run inside the server's runtime, whose
/// handle the backends' BLS requests then use.
pub fn server_hook(backends: &Arc<HostedBackends>) -> ServerHook {
    let backends = backends.clone();
    Arc::new(move |server: &Arc<Server>| {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("hosted backends: no runtime to serve BLS requests on");
            return;
        };
        let engine = Engine::attach(server.clone(), handle);
        backends.attach(TRITONSERVER_Server::new(engine, DEFAULT_EXIT_TIMEOUT_SECS));
    })
}

/// Starts a server as `options` describe: backends, response cache, repository and
/// start-up models, with Triton's start-up errors.
fn start(options: &TRITONSERVER_ServerOptions) -> Result<Engine> {
    if options.repositories.is_empty() {
        return Err(Error::invalid_arg("--model-repository must be specified"));
    }
    let hosted = HostedBackends::new(HostedSettings {
        directory: options.backend_directory.clone(),
        config: options.backend_config.clone(),
        strict_model_config: options.strict_model_config,
    });
    let embed = Options {
        backend_loader: Some(hosted.clone()),
        batch_strategies: Some(Arc::new(BatchLibraries::new(
            options.backend_directory.clone(),
        ))),
        on_server: vec![server_hook(&hosted)],
        model_repositories: options.repositories.clone(),
        control_mode: options.control_mode,
        startup_models: options.startup_models.clone(),
        strict_model_config: options.strict_model_config,
        strict_readiness: options.strict_readiness,
        exit_on_error: options.exit_on_error,
        id: options.server_id.clone(),
        backend_config: options.backend_config.clone(),
        cache: cache_store(options)?,
        // In-process, POLL mode polls when the program calls
        // TRITONSERVER_ServerPollModelRepository, as in Triton.
        repository_poll_secs: None,
        exit_timeout: Duration::from_secs(options.exit_timeout_secs.into()),
        metrics_config: options.metrics_config.clone(),
        model_config_name: options.model_config_name.clone(),
        model_load_thread_count: options.model_load_thread_count,
        model_load_retry_count: options.model_load_retry_count,
        model_namespacing: options.model_namespacing,
        repoagent_directory: options.repoagent_directory.clone(),
        rate_limit: options
            .rate_limit
            .then(|| options.rate_limit_resources.clone()),
        pinned_memory_pool_bytes: options.pinned_memory_pool_bytes,
        cuda_memory_pool_bytes: options.cuda_memory_pool_bytes.clone(),
        ..Options::default()
    };
    let polled = (options.cpu_metrics || options.gpu_metrics).then_some(PolledMetrics {
        interval: options.metrics_interval,
        cpu: options.cpu_metrics,
        gpu: options.gpu_metrics,
    });
    Engine::start(embed, polled)
}

/// The response cache store the options ask for: `SetCacheConfig` (a built-in or a
/// TRITONCACHE library from the cache directory) or the deprecated
/// `SetResponseCacheByteSize` (a local cache of that size; 0 leaves the cache off).
fn cache_store(options: &TRITONSERVER_ServerOptions) -> Result<Option<Arc<dyn CacheStore>>> {
    let config = match (&options.cache, options.response_cache_byte_size) {
        (Some((name, json)), _) => CacheConfig::from_json(name, json)?,
        (None, Some(size)) if size > 0 => {
            CacheConfig::from_json("local", &format!("{{\"size\":\"{size}\"}}"))?
        }
        _ => return Ok(None),
    };
    // As in Triton, every cache but `local` is a library in the cache directory
    // (`redis` too: Triton's libtritoncache_redis.so); only the binary builds Redis in.
    let kinds = CacheKinds {
        redis: None,
        libraries: Some(Arc::new(CacheLibraries)),
    };
    let directory = Some(options.cache_directory.as_path());
    nereid_embed::caches::open_store(&config, directory, &kinds).map(Some)
}

/// `TRITONSERVER_ServerNew`: starts a server with `options` and loads its models.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerNew(
    server: *mut *mut TRITONSERVER_Server,
    options: *mut TRITONSERVER_ServerOptions,
) -> ErrorPtr {
    ffi::status(|| {
        if server.is_null() {
            return Err(invalid_arg("server must not be null"));
        }
        // SAFETY: live options from `TRITONSERVER_ServerOptionsNew`, or null (checked).
        let options = unsafe { ffi::reference(options, "options") }?;
        super::logging::install(&options.log).map_err(invalid_arg)?;
        let engine = start(options).map_err(|e| from_core(&e))?;
        let created = Box::into_raw(Box::new(TRITONSERVER_Server::new(
            engine,
            options.exit_timeout_secs,
        )));
        // SAFETY: checked for null above; the caller owns the new server.
        unsafe { server.write(created) };
        Ok(())
    })
}
