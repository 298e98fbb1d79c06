//! [`serve`]: HTTP, gRPC, SageMaker, Vertex AI and metrics on listeners the caller bound,
//! until a shutdown future resolves; then no new connections, and in-flight requests
//! drain within the exit timeout. The caller binds, so it chooses addresses, backlog and
//! port 0, and reports bind failures in its own words.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use nereid_core::{Error, Result};
use nereid_grpc::GrpcOptions;
use nereid_http::sagemaker::SagemakerOptions;
use nereid_http::vertex_ai::VertexAiOptions;
use nereid_http::HttpOptions;
use nereid_net::Limits;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use nereid_embed::{Nereid, SystemMetrics, DEFAULT_METRICS_INTERVAL};

use crate::metrics::{MetricsAppendix, MetricsText};

/// The listeners to serve on; `None` leaves that frontend off (`--allow-http=false`...).
#[derive(Debug, Default)]
pub struct Listeners {
    /// KServe v2 HTTP/REST and Triton's HTTP extensions.
    pub http: Option<TcpListener>,
    /// KServe v2 gRPC (`inference.GRPCInferenceService`) and the health service.
    pub grpc: Option<TcpListener>,
    /// Prometheus text at `GET /metrics`.
    pub metrics: Option<TcpListener>,
    /// SageMaker's `/ping`, `/invocations` and multi-model `/models` (`--allow-sagemaker`).
    pub sagemaker: Option<TcpListener>,
    /// Vertex AI's health and predict routes (`--allow-vertex-ai`).
    pub vertex_ai: Option<TcpListener>,
    /// The OpenAI-compatible API (`--openai-port`).
    pub openai: Option<TcpListener>,
}

/// The frontends' settings: what the HTTP, gRPC, SageMaker, Vertex AI and metrics ports
/// need beyond their listener. Defaults are tritonserver's.
#[derive(Clone)]
pub struct FrontendOptions {
    /// The HTTP frontend: input size, connection limits, restricted APIs, header
    /// forwarding.
    pub http: HttpOptions,
    /// The gRPC frontend: input size, limits, keep-alive, restrictions, forwarding.
    pub grpc: GrpcOptions,
    /// The SageMaker endpoint: limits, default model, ping mode.
    pub sagemaker: SagemakerOptions,
    /// The Vertex AI endpoint: limits, routes, default model (its `metrics` redirect
    /// answers what the metrics port does).
    pub vertex_ai: VertexAiOptions,
    /// The OpenAI port: keys, strictness, size limit, tokenizer, tool-call parser (its
    /// connections take the HTTP port's limits).
    pub openai: nereid_openai::OpenAiOptions,
    /// Connection cap and timeouts of the metrics port.
    pub metrics_limits: Limits,
    /// Appended to the metrics text after the server's own metrics.
    pub metrics_appendix: Option<MetricsAppendix>,
    /// How often the system gauges (CPU utilization and memory) are polled
    /// (`--metrics-interval-ms`, default 2 s as in Triton).
    pub metrics_interval: Duration,
    /// Whether the CPU utilization and memory gauges are polled and exported
    /// (`--allow-cpu-metrics`, default true as in Triton).
    pub cpu_metrics: bool,
    /// Whether the GPU gauges are polled through NVML and exported
    /// (`--allow-gpu-metrics`, default true as in Triton's GPU builds).
    pub gpu_metrics: bool,
}

impl Default for FrontendOptions {
    fn default() -> Self {
        Self {
            http: HttpOptions {
                max_input_size: nereid_http::DEFAULT_MAX_INPUT_SIZE,
                limits: Limits::default(),
                restrictions: Arc::default(),
                header_forward: None,
            },
            grpc: GrpcOptions::default(),
            sagemaker: SagemakerOptions::default(),
            vertex_ai: VertexAiOptions::default(),
            openai: nereid_openai::OpenAiOptions::default(),
            metrics_limits: Limits::default(),
            metrics_appendix: None,
            metrics_interval: DEFAULT_METRICS_INTERVAL,
            cpu_metrics: true,
            gpu_metrics: true,
        }
    }
}

/// Serves every listener given until `shutdown` resolves, logging each as tritonserver
/// does ("Started HTTPService at ..."); then marks the server as stopping (readiness
/// false, streams end), stops accepting and waits up to the exit timeout for in-flight
/// requests. Models keep running: [`Nereid::shutdown`] stops them. Fails, before serving
/// anything, when a listener's address cannot be read or the SageMaker or Vertex AI
/// endpoint cannot start (Vertex AI without its routes or its default model).
pub async fn serve(
    nereid: &Nereid,
    listeners: Listeners,
    frontends: FrontendOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let server = nereid.server();
    // The CPU and GPU gauges are polled only for a metrics port, as Triton exports them
    // only with --allow-metrics; the Vertex AI redirect then shows them too.
    let (cpu, gpu) = (frontends.cpu_metrics, frontends.gpu_metrics);
    let system = (listeners.metrics.is_some() && (cpu || gpu))
        .then(|| Arc::new(SystemMetrics::new(cpu, gpu)));
    // The OpenAI port's LLM metrics follow everything else (so a family a backend exports
    // itself is seen and not written twice), on the metrics port and on the OpenAI port.
    let llm = listeners
        .openai
        .is_some()
        .then(|| Arc::new(nereid_openai::LlmMetrics::default()));
    let metrics_text = MetricsText {
        server: server.clone(),
        system: system.clone(),
        appendix: with_llm_metrics(frontends.metrics_appendix, llm.clone()),
    };
    let sagemaker = match listeners.sagemaker {
        Some(listener) => {
            let limits = frontends.sagemaker.endpoint.limits;
            let router = nereid_http::sagemaker::router(server.clone(), frontends.sagemaker)
                .await
                .map_err(|e| start_failure("Sagemaker", &e))?;
            Some((listener, router, limits))
        }
        None => None,
    };
    let vertex_ai = match listeners.vertex_ai {
        Some(listener) => {
            let limits = frontends.vertex_ai.endpoint.limits;
            let text = metrics_text.clone();
            let options = VertexAiOptions {
                metrics: Some(Arc::new(move || text.render())),
                ..frontends.vertex_ai
            };
            let router = nereid_http::vertex_ai::router(server.clone(), options)
                .await
                .map_err(|e| start_failure("Vertex AI", &e))?;
            Some((listener, router, limits))
        }
        None => None,
    };
    // The OpenAI port takes the HTTP port's connection limits.
    let openai_limits = frontends.http.limits;
    let stop = watch::Sender::new(false);
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    if let Some(listener) = listeners.grpc {
        started("GRPCInferenceService", &listener)?;
        let (server, signal) = (server.clone(), stopped(&stop));
        let options = frontends.grpc;
        tasks.push(tokio::spawn(async move {
            if let Err(e) = nereid_grpc::serve_with(server, listener, signal, options).await {
                tracing::error!("gRPC server failed: {e}");
            }
        }));
    }
    if let Some(listener) = listeners.http {
        started("HTTPService", &listener)?;
        tasks.push(tokio::spawn(nereid_http::serve(
            server.clone(),
            listener,
            frontends.http,
            stopped(&stop),
        )));
    }
    let endpoints = [
        ("Sagemaker HTTPService", "SageMaker", sagemaker),
        ("Vertex AI HTTPService", "Vertex AI", vertex_ai),
    ];
    for (service, port, endpoint) in endpoints {
        if let Some((listener, router, limits)) = endpoint {
            started(service, &listener)?;
            tasks.push(tokio::spawn(nereid_http::serve_router(
                router,
                listener,
                port,
                limits,
                stopped(&stop),
            )));
        }
    }
    if let (Some(listener), Some(llm)) = (listeners.openai, llm) {
        started("OpenAIService", &listener)?;
        let text = metrics_text.clone();
        let router = nereid_openai::router_with_llm_metrics(
            server.clone(),
            frontends.openai,
            Arc::new(move || text.render()),
            llm,
        );
        tasks.push(tokio::spawn(nereid_http::serve_router(
            router,
            listener,
            "OpenAI",
            openai_limits,
            stopped(&stop),
        )));
    }
    let poll = system.map(|system| {
        system.poll_now();
        tokio::spawn(system.poll_every(frontends.metrics_interval))
    });
    if let Some(listener) = listeners.metrics {
        started("Metrics Service", &listener)?;
        tasks.push(tokio::spawn(crate::metrics::serve(
            metrics_text,
            listener,
            frontends.metrics_limits,
            stopped(&stop),
        )));
    }
    tracing::info!(
        elapsed_ms = nereid.uptime().as_millis() as u64,
        "server started"
    );
    shutdown.await;
    tracing::info!("shutting down: no new connections, draining in-flight requests");
    server.begin_shutdown();
    stop.send_replace(true);
    let timeout = nereid.exit_timeout();
    if tokio::time::timeout(timeout, join_all(tasks))
        .await
        .is_err()
    {
        tracing::warn!(
            "exit timeout of {}s expired with requests still in flight",
            timeout.as_secs()
        );
        nereid.abandon();
    }
    if let Some(poll) = poll {
        poll.abort();
    }
    Ok(())
}

/// `appendix` followed by the OpenAI port's LLM metrics, when that port is served.
fn with_llm_metrics(
    appendix: Option<MetricsAppendix>,
    llm: Option<Arc<nereid_openai::LlmMetrics>>,
) -> Option<MetricsAppendix> {
    let Some(llm) = llm else {
        return appendix;
    };
    Some(Arc::new(move |text: &mut String| {
        if let Some(appendix) = &appendix {
            appendix(text);
        }
        llm.render(text);
    }))
}

/// tritonserver's report of an endpoint that cannot start ("failed to start Vertex AI
/// service: Invalid argument - ...").
fn start_failure(service: &str, e: &Error) -> Error {
    Error::new(
        e.kind(),
        format!(
            "failed to start {service} service: {} - {}",
            e.kind().triton_name(),
            e.message()
        ),
    )
}

/// Logs tritonserver's start line for a frontend, with the address really bound (port 0
/// becomes the chosen port; tests read it from the log).
fn started(what: &str, listener: &TcpListener) -> Result<()> {
    let address = listener
        .local_addr()
        .map_err(|e| nereid_core::Error::internal(format!("failed to start {what}: {e}")))?;
    tracing::info!("Started {what} at {address}");
    Ok(())
}

/// A future that resolves once `stop` is set, for one frontend.
fn stopped(stop: &watch::Sender<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut receiver = stop.subscribe();
    async move {
        // An error means the sender is gone, which also means stopping.
        let _ = receiver.wait_for(|stop| *stop).await;
    }
}

async fn join_all(tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}
