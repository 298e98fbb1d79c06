//! The metrics port: Prometheus text at `GET /metrics`, the server's metrics followed by
//! the machine's and whatever the embedding process appends.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use nereid_core::Server;
use nereid_net::Limits;
use tokio::net::TcpListener;

use crate::system_metrics::SystemMetrics;

/// Extra Prometheus text the embedding process appends to every scrape (the binary
/// adds its dropped-log-lines counter); called once per scrape.
pub type MetricsAppendix = Arc<dyn Fn(&mut String) + Send + Sync>;

#[derive(Clone)]
struct MetricsState {
    server: Arc<Server>,
    /// `None` with `--allow-cpu-metrics=false`: no CPU gauges.
    system: Option<Arc<SystemMetrics>>,
    appendix: Option<MetricsAppendix>,
}

/// Serves `/metrics` until `shutdown` resolves, under `limits`, polling the system
/// gauges every `interval` meanwhile (`None`: the CPU gauges are off).
pub async fn serve(
    server: Arc<Server>,
    listener: TcpListener,
    limits: Limits,
    appendix: Option<MetricsAppendix>,
    interval: Option<Duration>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let system = interval.map(|interval| {
        let system = Arc::new(SystemMetrics::default());
        (system.clone(), tokio::spawn(system.poll_every(interval)))
    });
    let (system, poll) = system.unzip();
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(MetricsState {
            server,
            system,
            appendix,
        });
    nereid_http::serve_router(app, listener, "metrics", limits, shutdown).await;
    if let Some(poll) = poll {
        poll.abort();
    }
}

async fn metrics(State(state): State<MetricsState>) -> impl IntoResponse {
    let mut text = state.server.metrics_text();
    if let Some(system) = &state.system {
        system.render(&mut text);
    }
    if let Some(appendix) = &state.appendix {
        appendix(&mut text);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}
