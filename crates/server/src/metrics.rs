//! The metrics port: Prometheus text at `GET /metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use nereid_core::Server;
use tokio::net::TcpListener;

use crate::system_metrics::SystemMetrics;

#[derive(Clone)]
struct MetricsState {
    server: Arc<Server>,
    system: Arc<SystemMetrics>,
}

/// Serves `/metrics` until `shutdown` resolves.
pub async fn serve(
    server: Arc<Server>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(MetricsState {
            server,
            system: Arc::new(SystemMetrics::default()),
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics(State(state): State<MetricsState>) -> impl IntoResponse {
    let mut text = state.server.metrics_text();
    state.system.render(&mut text);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}
