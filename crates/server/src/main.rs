//! `nereid`: a Triton-compatible inference server. A thin `main` over `nereid-embed`
//! (start-up) and `nereid-serve` (the ports):
//! parses the command line into its options, starts the server, binds the ports and
//! serves them until SIGINT or SIGTERM, then shuts down gracefully.

mod cli;
mod listen;
mod logging;
mod signal;
mod trace_flags;

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use nereid_core::cache::CacheStore;
use nereid_core::log_settings::LogControl;
use nereid_core::repository::RemoteRepository;
use nereid_core::trace::SpanSink;
use nereid_embed::caches::CacheKinds;
use nereid_embed::{Nereid, Options};
use nereid_http::sagemaker::{InferenceType, SagemakerOptions};
use nereid_http::vertex_ai::VertexAiOptions;
use nereid_http::{EndpointOptions, Health};
use nereid_otel::OtlpSink;
use nereid_serve::{FrontendOptions, Listeners};
use tokio::net::TcpListener;
use tritonserver::backend::{BatchLibraries, HostedBackends, HostedSettings};

use crate::cli::{Cli, Config};

fn main() {
    // Keeps the C ABI's functions in the executable (and, with build.rs, in its dynamic
    // symbol table) for the cache plugins it loads.
    std::hint::black_box(tritonserver::exported_functions());
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => cli::errors::exit(e),
    };
    // Exit status 1 for a refused command line, as tritonserver's.
    let config = match Config::from_cli(cli) {
        Ok(c) => c,
        Err(e) => {
            logging::report(&format!("error: {e:#}"));
            std::process::exit(1);
        }
    };
    for warning in cli::no_effect::deprecations(&config) {
        logging::report(&warning);
    }
    let log_control = match logging::init(&config) {
        Ok(control) => control,
        Err(e) => {
            logging::report(&format!("error: {e:#}"));
            std::process::exit(2);
        }
    };
    for note in cli::no_effect::notes(&config) {
        tracing::warn!("{note}");
    }
    listen::raise_fd_limit();
    let runtime = match nereid_net::io_runtime(config.io_threads()) {
        Ok(r) => r,
        Err(e) => {
            logging::report(&format!("error: cannot start the async runtime: {e}"));
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(run(config, log_control));
    // `run` has already waited as long as `--exit-timeout-secs` allows; a thread still
    // stuck on storage (a load reading a FIFO) must not hold the exit.
    runtime.shutdown_background();
    if let Err(e) = result {
        tracing::error!("{e:#}");
        // tritonserver logs a service that cannot start and says nothing more (its QA
        // counts the line); other start-up errors it also prints after "error: ".
        if !e.is::<ServiceNotStarted>() {
            logging::report(&format!("error: {e:#}"));
        }
        std::process::exit(1);
    }
}

/// An endpoint that could not listen, in tritonserver's words.
#[derive(Debug)]
struct ServiceNotStarted(String);

impl std::fmt::Display for ServiceNotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServiceNotStarted {}

/// Binds `service`'s port; a port in use is tritonserver's "failed to start GRPC service:
/// Unavailable - Socket '0.0.0.0:8001' already in use" (Triton's QA greps it).
async fn bind(
    service: &str,
    address: std::net::IpAddr,
    port: u16,
    reuse_port: bool,
) -> anyhow::Result<TcpListener> {
    listen::listen(
        SocketAddr::new(address, port),
        listen::max_backlog(),
        reuse_port,
    )
    .map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("Unavailable - Socket '{address}:{port}' already in use")
        } else {
            format!("{address}:{port}: {e}")
        };
        ServiceNotStarted(format!("failed to start {service} service: {why}")).into()
    })
}

/// The cache store `--cache-config` asks for; a Redis store starts connecting once the
/// server starts it.
fn cache_store(config: &Config) -> anyhow::Result<Option<Arc<dyn CacheStore>>> {
    let Some(cache) = config.cache_config()? else {
        return Ok(None);
    };
    let directory = config
        .cli
        .cache_directory
        .as_deref()
        .map(std::path::Path::new);
    // Redis is built in here; the C ABI finds it as a library, as Triton does.
    let kinds = CacheKinds {
        redis: Some(nereid_cache_redis::RedisStore::open),
        libraries: Some(Arc::new(tritonserver::cache::CacheLibraries)),
    };
    let store = nereid_embed::caches::open_store(&cache, directory, &kinds).map_err(|e| {
        anyhow::anyhow!(
            "creating server: {} - {}",
            e.kind().triton_name(),
            e.message()
        )
    })?;
    Ok(Some(store))
}

/// What [`Nereid::start`] needs, from the flags.
fn options(
    config: &Config,
    cache: Option<Arc<dyn CacheStore>>,
    log_control: Arc<LogControl>,
    span_sink: Option<Arc<OtlpSink>>,
) -> Options {
    let cli = &config.cli;
    let backend_config: Vec<_> = config
        .backend_settings
        .iter()
        .map(|s| (s.backend.clone(), s.key.clone(), s.value.clone()))
        .collect();
    let strict_model_config = config.strict_model_config;
    let hosted = HostedBackends::new(HostedSettings {
        directory: cli.backend_directory.clone(),
        config: backend_config.clone(),
        strict_model_config,
    });
    Options {
        model_repositories: config.model_repositories.clone(),
        remote_repositories: config
            .remote_repositories
            .iter()
            .map(|mirror| mirror.clone() as Arc<dyn RemoteRepository>)
            .collect(),
        control_mode: config.control_mode,
        startup_models: cli.load_model.clone(),
        strict_model_config,
        strict_readiness: cli.strict_readiness,
        exit_on_error: cli.exit_on_error,
        initialization_error: config.initialization_error.clone(),
        backend_directory: cli.backend_directory.clone(),
        id: cli.id.clone(),
        backend_config,
        backend_loader: Some(hosted.clone()),
        batch_strategies: Some(Arc::new(BatchLibraries::new(cli.backend_directory.clone()))),
        on_server: vec![tritonserver::inprocess::start::server_hook(&hosted)],
        cache,
        repository_poll_secs: Some(u64::try_from(cli.repository_poll_secs).unwrap_or(0)),
        exit_timeout: config.exit_timeout(),
        shm_limits: config.shm_limits(),
        storage_limits: config.storage_limits(),
        model_config_name: cli.model_config_name.clone(),
        model_load_thread_count: cli.model_load_thread_count,
        model_load_retry_count: cli.model_load_retry_count,
        model_namespacing: cli.model_namespacing,
        repoagent_directory: cli.repoagent_directory.clone(),
        log_control: Some(log_control),
        metrics_config: config.metrics_config.clone(),
        trace: config.trace.clone(),
        span_sink: span_sink.map(|sink| sink as Arc<dyn SpanSink>),
        rate_limit: config.rate_limit(),
        // tritonserver passes a negative size on as a huge unsigned one; none pins nothing.
        pinned_memory_pool_bytes: cli
            .pinned_memory_pool_byte_size
            .map_or(Options::default().pinned_memory_pool_bytes, |bytes| {
                u64::try_from(bytes).unwrap_or(0)
            }),
        cuda_memory_pool_bytes: cli.cuda_memory_pool_byte_size.clone(),
        gpu_instances_on_cpu: cli.gpu_instances_on_cpu,
        ..Options::default()
    }
}

/// Binds the ports the flags allow, in tritonserver's order, failing with its message.
async fn listeners(config: &Config) -> anyhow::Result<Listeners> {
    let cli = &config.cli;
    let mut listeners = Listeners::default();
    if let Some(grpc) = config.grpc {
        listeners.grpc = Some(bind("GRPC", grpc.ip(), grpc.port(), cli.reuse_grpc_port).await?);
    }
    if let Some(http) = config.http {
        listeners.http = Some(bind("HTTP", http.ip(), http.port(), cli.reuse_http_port).await?);
    }
    // tritonserver has no address flag for these two: they listen on every interface.
    let everywhere = std::net::IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED);
    if cli.allow_sagemaker {
        let port = cli.sagemaker_port;
        let listener = bind("Sagemaker", everywhere, port, false).await?;
        listeners.sagemaker = Some(listener);
    }
    if config.allow_vertex_ai {
        let port = config.vertex_ai_port;
        let listener = bind("Vertex AI", everywhere, port, false).await?;
        listeners.vertex_ai = Some(listener);
    }
    if let Some(port) = cli.openai.openai_port {
        let address = cli.openai.openai_address;
        listeners.openai = Some(bind("OpenAI", address, port, false).await?);
    }
    if cli.allow_metrics {
        listeners.metrics =
            Some(bind("Metrics", config.metrics_address, cli.metrics_port, false).await?);
    }
    Ok(listeners)
}

/// The frontends' settings from the flags, each port capped to fit the fd limit; fails
/// when the gRPC TLS files cannot be used.
fn frontends(config: &Config, span_sink: Option<Arc<OtlpSink>>) -> anyhow::Result<FrontendOptions> {
    let max_connections = listen::fitted_connection_cap(config.cli.max_connections);
    let http_limits = config.http_limits(max_connections);
    // SageMaker and Vertex AI take the HTTP port's input and connection limits.
    let endpoint = EndpointOptions {
        max_input_size: config.http_max_input_size(),
        limits: http_limits,
    };
    Ok(FrontendOptions {
        http: nereid_http::HttpOptions {
            max_input_size: config.http_max_input_size(),
            limits: http_limits,
            restrictions: config.http_restrictions.clone(),
            header_forward: config.http_header_forward.clone(),
        },
        grpc: config.grpc_options(max_connections)?,
        metrics_limits: http_limits,
        metrics_appendix: Some(Arc::new(move |text: &mut String| {
            tritonserver::metrics::render(text);
            nereid_embed::backends::render_metrics(text);
            logging::render_lost_lines(text);
            if let Some(sink) = &span_sink {
                sink.render_metrics(text);
            }
        })),
        metrics_interval: config.metrics_interval(),
        cpu_metrics: config.cli.allow_cpu_metrics,
        gpu_metrics: config.cli.allow_gpu_metrics,
        sagemaker: SagemakerOptions {
            endpoint,
            default_model: env("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"),
            ping: Health::from_mode(&env("SAGEMAKER_TRITON_PING_MODE").unwrap_or_default()),
            inference_type: match InferenceType::from_env(
                env("SAGEMAKER_TRITON_INFERENCE_TYPE").as_deref(),
            ) {
                Ok(inference_type) => inference_type,
                Err(refused) if config.cli.allow_sagemaker => anyhow::bail!(refused),
                Err(_) => InferenceType::Infer,
            },
        },
        // check_ranges keeps it above 0.
        openai: config
            .cli
            .openai
            .options(usize::try_from(config.cli.http_max_input_size).unwrap_or(usize::MAX))?,
        vertex_ai: VertexAiOptions {
            endpoint,
            predict_route: env("AIP_PREDICT_ROUTE"),
            health_route: env("AIP_HEALTH_ROUTE"),
            default_model: config.cli.vertex_ai_default_model.clone(),
            metrics: None,
        },
    })
}

/// An environment variable the SageMaker and Vertex AI endpoints read, as tritonserver
/// reads them (an unset or non-UTF-8 variable is absent).
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

async fn run(config: Config, log_control: Arc<LogControl>) -> anyhow::Result<()> {
    // Listen for signals before the (possibly slow) model loading, so an early SIGTERM is
    // a clean stop rather than the default kill.
    let mut signal = std::pin::pin!(signal::signal_listener()?);
    let cache = cache_store(&config)?;
    let span_sink = match &config.otlp {
        Some(otlp) => {
            Some(OtlpSink::start(otlp).map_err(|e| anyhow::anyhow!("creating server: {e}"))?)
        }
        None => None,
    };
    // Before the models load, so that unusable TLS files stop start-up at once.
    let frontends = frontends(&config, span_sink.clone())?;
    let start = Nereid::start(options(&config, cache, log_control, span_sink));
    let nereid = tokio::select! {
        started = start => started.map_err(|e| {
            anyhow::anyhow!("creating server: {} - {e}", e.kind().triton_name())
        })?,
        () = &mut signal => {
            tracing::info!("signal received while loading models: exiting");
            return Ok(());
        }
    };
    let listeners = listeners(&config).await?;
    nereid_serve::serve(&nereid, listeners, frontends, signal).await?;
    nereid.shutdown().await;
    Ok(())
}
