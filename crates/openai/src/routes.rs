//! The route table and the small routes: `/v1/models`, `/v1/models/{id}`,
//! `/health/ready` and `/metrics` (as Triton's frontend has them on its port); the body of
//! every POST route is read here under the size limit.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

use crate::error::{ApiError, ApiResult};
use crate::sse::created;
use crate::AppState;

pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/models/{*id}", get(one_model))
        .route("/v1/completions", post(crate::completions::handle))
        .route("/v1/chat/completions", post(crate::chat::handle))
        .route("/v1/embeddings", post(crate::embeddings::handle))
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

/// A request body of at most the port's limit, after the API key check.
pub(crate) async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Bytes> {
    state.authorize(headers)?;
    let limit = state.options.max_request_size;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(limit));
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::too_large(limit))
}

/// The model object of `/v1/models`.
fn model_object(name: &str) -> serde_json::Value {
    json!({
        "id": name,
        "object": "model",
        "created": created(),
        "owned_by": "nereid",
    })
}

async fn list_models(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    state.authorize(&headers)?;
    let data: Vec<_> = state
        .catalog
        .list()
        .iter()
        .map(|(spec, _)| model_object(&spec.name))
        .collect();
    Ok(axum::Json(json!({ "object": "list", "data": data })).into_response())
}

async fn one_model(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    state.authorize(&headers)?;
    let listed = state.catalog.list();
    let (spec, _) = listed
        .iter()
        .find(|(spec, _)| spec.name == id)
        .ok_or_else(|| ApiError::unknown_model(&id))?;
    Ok(axum::Json(model_object(&spec.name)).into_response())
}

/// 200 while the server is ready (Triton's frontend asks its server the same way).
async fn ready(State(state): State<AppState>) -> StatusCode {
    if state.server().is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; charset=utf-8; version=0.0.4",
        )],
        (state.metrics)(),
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: "Not Found".into(),
        kind: "invalid_request_error",
        param: None,
        code: None,
    }
}
