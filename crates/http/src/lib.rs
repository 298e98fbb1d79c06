//! The KServe v2 / Triton HTTP/REST frontend: thin handlers that decode, make one call on
//! the core facade and encode, with Triton's status codes and `{"error": ...}` bodies.
//! The SageMaker ([`sagemaker`]) and Vertex AI ([`vertex_ai`]) endpoints are served
//! from the same handlers on ports of their own.

mod admin;
mod body;
mod call;
mod compression;
#[cfg(test)]
mod decoupled_tests;
mod endpoint;
mod error;
#[cfg(test)]
mod forward_tests;
#[cfg(test)]
mod fuzz_tests;
mod generate;
mod infer;
mod infer_route;
mod json_data;
mod logging;
mod request_json;
mod request_scan;
mod response_json;
mod restrict;
pub mod sagemaker;
mod serve;
mod shm;
mod trace;
pub mod vertex_ai;

use std::future::Future;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use nereid_core::header_forward::HeaderForward;
use nereid_core::restricted::{ApiGroup, Restrictions};
use nereid_core::Server;

pub use crate::endpoint::{EndpointOptions, Health};
use crate::error::{error_body, ApiResult};
pub use crate::serve::serve_router;

/// Triton's `HTTP_DEFAULT_MAX_INPUT_SIZE` (64 MiB), the default `--http-max-input-size`.
pub const DEFAULT_MAX_INPUT_SIZE: usize = 1 << 26;

/// HTTP frontend settings.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// `--http-max-input-size`: the largest request JSON, raw input and decompressed body,
    /// each refused past it with Triton's 400 and message.
    pub max_input_size: usize,
    /// Connection cap and timeouts for the port.
    pub limits: nereid_net::Limits,
    /// API groups that answer only requests carrying their header
    /// (`--http-restricted-api`).
    pub restrictions: Arc<Restrictions>,
    /// Headers to forward to the model as request parameters on the infer endpoint
    /// (`--http-header-forward-pattern`; Triton forwards none on generate).
    pub header_forward: Option<Arc<HeaderForward>>,
}

impl HttpOptions {
    /// The largest body read off the wire at all (413 past it): see [`MAX_BODY_SIZE`].
    pub fn body_limit(&self) -> usize {
        body_limit(self.max_input_size)
    }
}

/// The largest HTTP body, binary tensor data included. Triton limits the JSON and raw
/// inputs (`--http-max-input-size`) but not the binary tensor data after the JSON, which
/// its clients send by the gigabyte (L0_large_payload sends 1.9 GB with default flags);
/// here that data is bounded as a gRPC message is (Triton's `MAX_GRPC_MESSAGE_SIZE`,
/// 2 GiB - 1), or by twice the input limit when that is more, so that a body just over
/// the input limit still gets Triton's message.
pub const MAX_BODY_SIZE: usize = 2_147_483_647;

/// [`HttpOptions::body_limit`] for an input limit, shared with the SageMaker and Vertex
/// AI ports.
fn body_limit(max_input_size: usize) -> usize {
    max_input_size.saturating_mul(2).max(MAX_BODY_SIZE)
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
    let infer = infer_route::InferRoute::new(AppState {
        server: server.clone(),
        options: options.clone(),
    });
    let app = router(server, options);
    serve::serve_routes(
        app,
        infer,
        listener,
        "HTTP",
        serve::RequestLog::Verbose,
        limits,
        shutdown,
    )
    .await;
}

/// The route table (public so tests can drive it without a socket). Each route names its
/// API group as Triton's handlers do, for `--http-restricted-api`.
pub fn router(server: Arc<Server>, options: HttpOptions) -> Router {
    let restrictions = options.restrictions.clone();
    let body_limit = options.body_limit();
    let state = AppState { server, options };
    let guard = |group, route| restrict::route(&restrictions, group, route);
    let stamp = axum::middleware::from_fn_with_state(state.server.clone(), trace::stamp_arrival);
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
        .route(
            "/infer",
            guard(
                ApiGroup::Inference,
                post(infer_handler).layer(stamp.clone()),
            ),
        )
        .route(
            "/generate",
            guard(
                ApiGroup::Inference,
                post(generate::generate).layer(stamp.clone()),
            ),
        )
        .route(
            "/generate_stream",
            guard(
                ApiGroup::Inference,
                post(generate::generate_stream).layer(stamp),
            ),
        );
    let repository = ApiGroup::ModelRepository;
    let json_length = axum::middleware::from_fn_with_state(
        state.options.max_input_size,
        admin::limit_json_length,
    );
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
            "/v2/logging",
            guard(
                ApiGroup::Logging,
                get(logging::get_settings)
                    .post(logging::update_settings)
                    .layer(json_length.clone()),
            ),
        )
        .route(
            "/v2/repository/index",
            guard(
                repository,
                post(admin::repository_index).layer(json_length.clone()),
            ),
        )
        .route(
            "/v2/repository/models/{model}/load",
            guard(repository, post(admin::load).layer(json_length.clone())),
        )
        .route(
            "/v2/repository/models/{model}/unload",
            guard(repository, post(admin::unload).layer(json_length)),
        )
        .route(
            "/v2/trace/setting",
            guard(
                ApiGroup::Trace,
                get(trace::get_global).post(trace::post_global),
            ),
        )
        .route(
            "/v2/models/{model}/trace/setting",
            guard(
                ApiGroup::Trace,
                get(trace::get_model).post(trace::post_model),
            ),
        )
        .fallback(|| async { error_body(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::map_response(error::json_rejections))
        .with_state(state)
}

async fn infer_handler(
    State(state): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
    headers: HeaderMap,
    arrival: Option<Extension<trace::Arrival>>,
    body: Bytes,
) -> ApiResult<Response> {
    let (model, version) = admin::model_path(&path)?;
    let call = call::InferCall {
        server: &state.server,
        model: &model,
        version,
        headers: &headers,
        arrival,
        max_input_size: state.options.max_input_size,
        framing: call::Framing::Kserve,
        header_forward: state.options.header_forward.as_deref(),
    };
    Ok(call::infer(call, body)?.await?)
}
