//! [`Nereid`]: a started server. Start-up does what tritonserver does before it opens
//! any port (backends, repository, start-up models, exit-on-error, the poll task), so a
//! program can call the server in-process with no listener at all; shutdown drains and
//! stops the models within the exit timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_core::cache::ResponseCache;
use nereid_core::config::NormalizeOptions;
use nereid_core::rate_limit::RateLimiter;
use nereid_core::repository::LoadSettings;
use nereid_core::server::ServerIdentity;
use nereid_core::trace::TraceManager;
use nereid_core::{ControlMode, Error, ModelRepository, RepositoryOptions, Result, Server};
use tokio::task::JoinHandle;

use crate::Options;

/// A running server: models loaded, ready for in-process calls through
/// [`Nereid::server`] and for `nereid_serve::serve`. Dropping it without
/// [`Nereid::shutdown`] stops polling but leaves the models to the process's end.
pub struct Nereid {
    server: Arc<Server>,
    /// When start-up began, for the "server started" log line's elapsed time.
    started: Instant,
    exit_timeout: Duration,
    /// The poll-mode task; owned here so shutdown (or drop) ends it.
    poll: Option<JoinHandle<()>>,
    /// Set by `nereid_serve::serve` when in-flight requests outlived the exit timeout: the
    /// process is giving up on them, so shutdown does not wait again for the models.
    abandoned: AtomicBool,
}

impl Nereid {
    /// Starts a server: builds the backends, loads the start-up models and, in poll
    /// mode, starts polling the repositories. Fails as tritonserver fails to create its
    /// server: an unreadable repository, an unknown `--load-model`, a bad backend
    /// setting, or (with [`Options::exit_on_error`]) any model that failed to load.
    /// Must run inside a tokio runtime, which then runs the server's tasks.
    pub async fn start(options: Options) -> Result<Nereid> {
        let started = Instant::now();
        // One pool per process, as Triton's: the last server started sets its size.
        nereid_shm::pinned::POOL.set_total(options.pinned_memory_pool_bytes);
        nereid_shm::cuda_pool::POOLS.configure(&options.cuda_memory_pool_bytes);
        let registry = crate::backends::registry(&options)?;
        let cache = options.cache.clone().map(|store| {
            let cache = ResponseCache::new(store);
            cache.start();
            tracing::info!("response cache enabled: {}", cache.describe());
            Arc::new(cache)
        });
        let repository = Arc::new(ModelRepository::new(
            RepositoryOptions {
                roots: options.model_repositories.clone(),
                remotes: options.remote_repositories.clone(),
                control_mode: options.control_mode,
                startup_models: options.startup_models.clone(),
                settings: LoadSettings {
                    strict_model_config: options.strict_model_config,
                    normalize: NormalizeOptions {
                        gpu_count: nereid_shm::gpu_count(),
                        gpu_instances_on_cpu: options.gpu_instances_on_cpu,
                    },
                    cache,
                    metrics: options.metrics_config.clone(),
                    flags: options.repository_flags(),
                    rate_limiter: options.rate_limit.clone().map(RateLimiter::new),
                    batch_strategies: options.batch_strategies.clone(),
                },
                storage: options.storage_limits,
            },
            registry,
        ));
        let mut server = Server::new(
            ServerIdentity {
                name: options.id.clone(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            },
            repository.clone(),
            options.strict_readiness,
        )
        .with_shm_limits(options.shm_limits)
        .with_trace(TraceManager::new(
            &options.trace,
            options.span_sink.clone(),
        )?);
        if let Some(control) = &options.log_control {
            server = server.with_log_control(control.clone());
        }
        if let Some(error) = &options.initialization_error {
            tracing::error!("{error}");
            server = server.failed_to_initialize();
        }
        let server = Arc::new(server);
        for hook in &options.on_server {
            hook(&server);
        }
        let failures = repository.load_startup_models().await?;
        match repository.status_table().await {
            Ok(table) => tracing::info!(table = true, "\n{table}"),
            Err(e) => tracing::warn!("cannot list the models' states: {e}"),
        }
        if options.exit_on_error && !failures.is_empty() {
            repository.stop_all();
            return Err(Error::internal(format!(
                "failed to load all models ({} failed; start with --exit-on-error=false to serve the others)",
                failures.len()
            )));
        }
        let poll = (options.control_mode == ControlMode::Poll)
            .then(|| tokio::spawn(poll(repository, options.poll_interval())));
        Ok(Nereid {
            server,
            started,
            exit_timeout: options.exit_timeout,
            poll,
            abandoned: AtomicBool::new(false),
        })
    }

    /// The core facade: in-process inference, metadata, statistics, load/unload, the
    /// same calls the frontends make.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// How long shutdown waits for requests and then for models.
    pub fn exit_timeout(&self) -> Duration {
        self.exit_timeout
    }

    /// Time since [`Nereid::start`] began (the start-up time `nereid-serve` logs).
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Records that in-flight requests outlived the exit timeout (see the field);
    /// `nereid-serve` calls it when its drain gives up.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }

    /// Stops the server: readiness turns false, polling ends, and the models stop
    /// (their queues drain and instance threads are joined) within the exit timeout. A
    /// model still stuck past it is left behind with a warning, so an exit is never
    /// held up. Call after `nereid_serve::serve` returned, if serving.
    pub async fn shutdown(mut self) {
        self.server.begin_shutdown();
        if let Some(poll) = self.poll.take() {
            poll.abort();
        }
        if self.abandoned.load(Ordering::Relaxed) {
            self.server.trace().flush();
            return;
        }
        let repository = self.server.repository().clone();
        let stop = tokio::task::spawn_blocking(move || repository.stop_all());
        if tokio::time::timeout(self.exit_timeout, stop).await.is_err() {
            tracing::warn!("exit timeout expired while stopping models");
        }
        // After the models, so the traces of the last requests are in.
        self.server.trace().flush();
        tracing::info!("exiting");
    }
}

impl Drop for Nereid {
    fn drop(&mut self) {
        if let Some(poll) = self.poll.take() {
            poll.abort();
        }
    }
}

/// Poll mode: rescans the repositories every `interval` for as long as it runs.
async fn poll(repository: Arc<ModelRepository>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        if let Err(e) = repository.poll().await {
            tracing::error!("repository poll failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::testing::{self, TestBackend, BACKEND_NAME};

    #[tokio::test]
    async fn infers_in_process_without_listeners() {
        let repo = tempfile::tempdir().expect("temp dir");
        testing::write_model(
            repo.path(),
            "ident",
            r#"backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 3 ] } ]"#,
            &[1],
        );
        let backend = TestBackend::identity();
        let mut options = Options {
            model_repositories: vec![repo.path().to_path_buf()],
            ..Options::default()
        };
        options
            .extra_backends
            .insert(BACKEND_NAME, Arc::new(backend.clone()));
        let nereid = Nereid::start(options).await.expect("starts");
        assert!(nereid.server().is_ready());
        let input = testing::int32_input("INPUT0", &[3], &[1, 2, 3]);
        let response = nereid
            .server()
            .infer(testing::request("ident", "r1", vec![input]))
            .await
            .expect("infers");
        assert_eq!(response.id, "r1");
        assert_eq!(testing::int32s(&response.outputs[0].data), [1, 2, 3]);
        assert_eq!(backend.executions().len(), 1);
        nereid.shutdown().await;
    }
}
