//! The KServe v2 / Triton HTTP/REST frontend: thin handlers that decode, make one call on
//! the core facade and encode, with Triton's status codes and `{"error": ...}` bodies.

mod admin;
mod compression;
mod error;
#[cfg(test)]
mod fuzz_tests;
mod infer;
mod json_data;
mod restrict;
mod serve;
mod shm;

use std::future::Future;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use nereid_core::restricted::{ApiGroup, Restrictions};
use nereid_core::Server;

use crate::error::{error_body, ApiResult};
pub use crate::serve::serve_router;

/// HTTP frontend settings.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest accepted request body, compressed or decompressed (`--http-max-input-size`).
    pub max_body_bytes: usize,
    /// Connection cap and timeouts for the port.
    pub limits: nereid_net::Limits,
    /// API groups that answer only requests carrying their header
    /// (`--http-restricted-api`).
    pub restrictions: Arc<Restrictions>,
}

#[derive(Clone)]
struct AppState {
    server: Arc<Server>,
    options: HttpOptions,
}

/// Serves HTTP on `listener` until `shutdown` resolves, then lets in-flight requests finish.
pub async fn serve(
    server: Arc<Server>,
    listener: tokio::net::TcpListener,
    options: HttpOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let limits = options.limits;
    let app = router(server, options);
    serve_router(app, listener, "HTTP", limits, shutdown).await;
}

/// The route table (public so tests can drive it without a socket). Each route names its
/// API group as Triton's handlers do, for `--http-restricted-api`.
pub fn router(server: Arc<Server>, options: HttpOptions) -> Router {
    let restrictions = options.restrictions.clone();
    let max_body_bytes = options.max_body_bytes;
    let state = AppState { server, options };
    let guard = |group, route| restrict::route(&restrictions, group, route);
    let model_routes = Router::new()
        .route("/", guard(ApiGroup::Metadata, get(admin::model_metadata)))
        .route("/ready", guard(ApiGroup::Health, get(admin::model_ready)))
        .route(
            "/config",
            guard(ApiGroup::ModelConfig, get(admin::model_config)),
        )
        .route(
            "/stats",
            guard(ApiGroup::Statistics, get(admin::model_stats)),
        )
        .route("/infer", guard(ApiGroup::Inference, post(infer_handler)));
    let repository = ApiGroup::ModelRepository;
    Router::new()
        .route("/v2/health/live", guard(ApiGroup::Health, get(admin::live)))
        .route(
            "/v2/health/ready",
            guard(ApiGroup::Health, get(admin::ready)),
        )
        .route(
            "/v2",
            guard(ApiGroup::Metadata, get(admin::server_metadata)),
        )
        .route(
            "/v2/",
            guard(ApiGroup::Metadata, get(admin::server_metadata)),
        )
        .route(
            "/v2/models/stats",
            guard(ApiGroup::Statistics, get(admin::all_stats)),
        )
        .nest("/v2/models/{model}", model_routes.clone())
        .nest("/v2/models/{model}/versions/{version}", model_routes)
        .merge(restrict::router(
            &restrictions,
            ApiGroup::SharedMemory,
            shm::routes(),
        ))
        .route(
            "/v2/repository/index",
            guard(repository, post(admin::repository_index)),
        )
        .route(
            "/v2/repository/models/{model}/load",
            guard(repository, post(admin::load)),
        )
        .route(
            "/v2/repository/models/{model}/unload",
            guard(repository, post(admin::unload)),
        )
        .fallback(|| async { error_body(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::map_response(error::json_rejections))
        .with_state(state)
}

async fn infer_handler(
    State(state): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let (model, version) = admin::model_path(&path)?;
    let body = compression::decode_body(&headers, body, state.options.max_body_bytes)?;
    let (request, format) = infer::decode(&model, version, &headers, body, state.server.shm())?;
    let response = state.server.infer(request).await?;
    Ok(infer::encode(
        &response,
        &format,
        compression::accepted(&headers),
    )?)
}
