//! The metrics port: Prometheus text at `GET /metrics`, the server's metrics followed by
//! the machine's and whatever the embedding process appends.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use nereid_core::Server;
use nereid_embed::SystemMetrics;
use nereid_net::Limits;
use tokio::net::TcpListener;

/// Extra Prometheus text the embedding process appends to every scrape (the binary
/// adds its dropped-log-lines counter); called once per scrape.
pub type MetricsAppendix = Arc<dyn Fn(&mut String) + Send + Sync>;

/// What a scrape answers: the server's metrics, then the machine's (when polled), then
/// the embedding process's appendix. Shared by the metrics port and Vertex AI's
/// `metrics` redirect, so both render the same text.
#[derive(Clone)]
pub(crate) struct MetricsText {
    pub(crate) server: Arc<Server>,
    /// `None` with `--allow-cpu-metrics=false` or without a metrics port: no CPU gauges.
    pub(crate) system: Option<Arc<SystemMetrics>>,
    pub(crate) appendix: Option<MetricsAppendix>,
}

impl MetricsText {
    /// The Prometheus text of one scrape.
    pub(crate) fn render(&self) -> String {
        let mut text = self.server.metrics_text();
        if let Some(system) = &self.system {
            system.render(&mut text);
        }
        if let Some(appendix) = &self.appendix {
            appendix(&mut text);
        }
        text
    }
}

/// Serves `/metrics` with `text` until `shutdown` resolves, under `limits` (the caller
/// polls the system gauges).
pub(crate) async fn serve(
    text: MetricsText,
    listener: TcpListener,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(text);
    nereid_http::serve_router(app, listener, "metrics", limits, shutdown).await;
}

async fn metrics(State(text): State<MetricsText>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text.render(),
    )
}
