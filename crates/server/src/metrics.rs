//! The metrics port: Prometheus text at `GET /metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use nereid_core::Server;
use nereid_net::Limits;
use tokio::net::TcpListener;

use crate::system_metrics::SystemMetrics;

#[derive(Clone)]
struct MetricsState {
    server: Arc<Server>,
    system: Arc<SystemMetrics>,
}

/// Serves `/metrics` until `shutdown` resolves, under the HTTP port's connection limits.
pub async fn serve(
    server: Arc<Server>,
    listener: TcpListener,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(MetricsState {
            server,
            system: Arc::new(SystemMetrics::default()),
        });
    nereid_http::serve_router(app, listener, "metrics", limits, shutdown).await;
}

/// Nereid's own counter (Triton has none): log lines dropped because stderr refused them,
/// so an operator can see that a log shipper went away.
fn render_lost_log_lines(out: &mut String, lost: u64) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP nereid_log_lines_dropped_total Log lines dropped because stderr could not take them"
    );
    let _ = writeln!(out, "# TYPE nereid_log_lines_dropped_total counter");
    let _ = writeln!(out, "nereid_log_lines_dropped_total {lost}");
}

async fn metrics(State(state): State<MetricsState>) -> impl IntoResponse {
    let mut text = state.server.metrics_text();
    state.system.render(&mut text);
    tritonserver::metrics::render(&mut text);
    render_lost_log_lines(&mut text, crate::logging::lost_lines());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}
