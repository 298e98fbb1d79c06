//! The metrics port: Prometheus text at `GET /metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use nereid_core::Server;
use tokio::net::TcpListener;

/// Serves `/metrics` until `shutdown` resolves.
pub async fn serve(
    server: Arc<Server>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(server);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics(State(server): State<Arc<Server>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        server.metrics_text(),
    )
}
