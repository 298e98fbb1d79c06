//! `nereid`: a Triton-compatible inference server. Parses the command line, loads the
//! model repository, serves HTTP, gRPC and metrics, and shuts down gracefully on SIGINT or
//! SIGTERM.

mod cli;
mod listen;
mod logging;
mod metrics;
mod shutdown;
mod system_metrics;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use nereid_backend_onnx::{find_library, OnnxBackend, OrtRuntime, StatefulBackend};
use nereid_cache_redis::RedisStore;
use nereid_core::cache::local::LocalCache;
use nereid_core::cache::{CacheStore, ResponseCache};
use nereid_core::config::NormalizeOptions;
use nereid_core::repository::{BackendRegistry, LoadSettings};
use nereid_core::server::ServerIdentity;
use nereid_core::{ControlMode, ModelRepository, RepositoryOptions, Server};
use tokio::net::TcpListener;

use crate::cli::{Cli, Config};
use crate::shutdown::Shutdown;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let config = match Config::from_cli(cli) {
        Ok(c) => c,
        Err(e) => {
            logging::report(&format!("error: {e:#}"));
            std::process::exit(2);
        }
    };
    logging::init(&config);
    listen::raise_fd_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("nereid-io")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            logging::report(&format!("error: cannot start the async runtime: {e}"));
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(run(config));
    // `run` has already waited as long as `--exit-timeout-secs` allows; a thread still
    // stuck on storage (a load reading a FIFO) must not hold the exit.
    runtime.shutdown_background();
    if let Err(e) = result {
        tracing::error!("{e:#}");
        logging::report(&format!("error: {e:#}"));
        std::process::exit(1);
    }
}

fn backends(config: &Config) -> anyhow::Result<BackendRegistry> {
    let mut registry = BackendRegistry::new();
    let explicit = config
        .backend_setting("onnxruntime", "library-path")
        .map(std::path::PathBuf::from);
    let default_max_batch_size =
        match config.backend_setting("onnxruntime", "default-max-batch-size") {
            Some(v) => v.parse().with_context(|| {
                format!("--backend-config onnxruntime,default-max-batch-size={v}: not an integer")
            })?,
            None => 4,
        };
    match find_library(explicit.as_deref()) {
        Some(library_path) => {
            let runtime = OrtRuntime::new(library_path);
            let onnx = OnnxBackend::new(runtime.clone(), default_max_batch_size);
            registry.insert("onnxruntime", Arc::new(onnx));
            registry.insert("stateful", Arc::new(StatefulBackend::new(runtime)));
        }
        None => tracing::error!(
            "ONNX Runtime library not found: set ORT_DYLIB_PATH, pass --backend-config=onnxruntime,library-path=<libonnxruntime.so>, or install the onnxruntime wheel into ./.venv; ONNX models will fail to load"
        ),
    }
    Ok(registry)
}

async fn bind(
    what: &str,
    address: std::net::IpAddr,
    port: u16,
) -> anyhow::Result<(TcpListener, SocketAddr)> {
    let listener = listen::listen(SocketAddr::new(address, port), listen::max_backlog())
        .with_context(|| format!("failed to start {what} at {address}:{port}"))?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// The response cache `--cache-config` asks for; a Redis cache starts connecting now.
fn response_cache(config: &Config) -> anyhow::Result<Option<Arc<ResponseCache>>> {
    let Some(cache) = config.cache_config()? else {
        return Ok(None);
    };
    let store: nereid_core::Result<Arc<dyn CacheStore>> = match cache.name.as_str() {
        "local" => LocalCache::from_config(&cache).map(|c| Arc::new(c) as _),
        "redis" => RedisStore::from_config(&cache).map(|c| Arc::new(c) as _),
        other => anyhow::bail!(
            "creating server: unknown cache '{other}': nereid has the 'local' and 'redis' caches"
        ),
    };
    let store = store.map_err(|e| anyhow::anyhow!("creating server: {e}"))?;
    let cache = ResponseCache::new(store);
    cache.start();
    tracing::info!("response cache enabled: {}", cache.describe());
    Ok(Some(Arc::new(cache)))
}

async fn run(config: Config) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // Listen for signals before the (possibly slow) model loading, so an early SIGTERM is
    // a clean stop rather than the default kill.
    let mut signal = std::pin::pin!(shutdown::signal_listener()?);
    let registry = backends(&config)?;
    let cache = response_cache(&config)?;
    let repository = Arc::new(ModelRepository::new(
        RepositoryOptions {
            roots: config.cli.model_repository.clone(),
            control_mode: config.control_mode,
            startup_models: config.cli.load_model.clone(),
            settings: LoadSettings {
                strict_model_config: config.cli.strict_model_config
                    || config.cli.disable_auto_complete_config,
                normalize: NormalizeOptions { gpu_count: 0 },
                cache,
            },
            storage: config.storage_limits(),
        },
        registry,
    ));
    let failures = tokio::select! {
        loaded = repository.load_startup_models() => loaded?,
        () = &mut signal => {
            tracing::info!("signal received while loading models: exiting");
            return Ok(());
        }
    };
    if config.cli.exit_on_error && !failures.is_empty() {
        repository.stop_all();
        anyhow::bail!(
            "creating server: Internal - failed to load all models ({} failed; start with --exit-on-error=false to serve the others)",
            failures.len()
        );
    }
    let server = Arc::new(
        Server::new(
            ServerIdentity {
                name: config.cli.id.clone(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            },
            repository.clone(),
            config.cli.strict_readiness,
        )
        .with_shm_limits(config.shm_limits()),
    );
    let shutdown = Shutdown::new();
    let max_connections = listen::fitted_connection_cap(config.cli.max_connections);
    let http_limits = config.http_limits(max_connections);
    let mut tasks = Vec::new();
    if config.cli.allow_grpc {
        let (listener, addr) = bind(
            "GRPCInferenceService",
            config.cli.grpc_address,
            config.cli.grpc_port,
        )
        .await?;
        tracing::info!("Started GRPCInferenceService at {addr}");
        let (server, signal) = (server.clone(), shutdown.signal());
        let options = config.grpc_options(max_connections);
        tasks.push(tokio::spawn(async move {
            if let Err(e) = nereid_grpc::serve_with(server, listener, signal, options).await {
                tracing::error!("gRPC server failed: {e}");
            }
        }));
    }
    if config.cli.allow_http {
        let (listener, addr) =
            bind("HTTPService", config.cli.http_address, config.cli.http_port).await?;
        tracing::info!("Started HTTPService at {addr}");
        let options = nereid_http::HttpOptions {
            max_input_size: config.cli.http_max_input_size,
            limits: http_limits,
            restrictions: config.http_restrictions.clone(),
            header_forward: config.http_header_forward.clone(),
        };
        let (server, signal) = (server.clone(), shutdown.signal());
        tasks.push(tokio::spawn(nereid_http::serve(
            server, listener, options, signal,
        )));
    }
    if config.cli.allow_metrics {
        let (listener, addr) = bind(
            "Metrics Service",
            config.cli.metrics_address,
            config.cli.metrics_port,
        )
        .await?;
        tracing::info!("Started Metrics Service at {addr}");
        let (server, signal) = (server.clone(), shutdown.signal());
        tasks.push(tokio::spawn(metrics::serve(
            server,
            listener,
            http_limits,
            signal,
        )));
    }
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "server started"
    );
    if config.control_mode == ControlMode::Poll {
        let repository = repository.clone();
        let interval = Duration::from_secs(config.cli.repository_poll_secs.max(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                if let Err(e) = repository.poll().await {
                    tracing::error!("repository poll failed: {e}");
                }
            }
        });
    }
    (&mut signal).await;
    tracing::info!("shutting down: no new connections, draining in-flight requests");
    server.begin_shutdown();
    shutdown.trigger();
    let drain = futures_join(tasks);
    let timeout = Duration::from_secs(config.cli.exit_timeout_secs);
    if tokio::time::timeout(timeout, drain).await.is_err() {
        tracing::warn!(
            "exit timeout of {}s expired with requests still in flight",
            timeout.as_secs()
        );
        return Ok(());
    }
    let stop = tokio::task::spawn_blocking(move || repository.stop_all());
    if tokio::time::timeout(timeout, stop).await.is_err() {
        tracing::warn!("exit timeout expired while stopping models");
    }
    tracing::info!("exiting");
    Ok(())
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        let _ = t.await;
    }
}
