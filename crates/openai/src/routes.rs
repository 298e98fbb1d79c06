//! The route table and the small routes: `/v1/models`, `/v1/models/{id}`, model load and
//! unload (`POST /v1/models/{name}/load|unload`, explicit model control only),
//! `/health/ready` and `/metrics` (as Triton's frontend has them on its port); the body of
//! every POST route is read here under the size limit.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

use nereid_core::repository::{ControlMode, LoadRequest};

use crate::error::{ApiError, ApiResult};
use crate::sse::created;
use crate::AppState;

pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/models", get(list_models))
        // POST is `{name}/load` and `{name}/unload` (one path segment for the name, as on
        // Triton's frontend; the router cannot hold those beside the wildcard); other
        // methods and paths are unknown (404).
        .route(
            "/v1/models/{*id}",
            get(one_model).post(model_action).fallback(not_found),
        )
        .route("/v1/completions", post(crate::completions::handle))
        .route("/v1/chat/completions", post(crate::chat::handle))
        .route("/v1/embeddings", post(crate::embeddings::handle))
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::restricted::check,
        ))
        .with_state(state)
}

/// The model object of `/v1/models`.
fn model_object(name: &str) -> serde_json::Value {
    json!({
        "id": name,
        "object": "model",
        "created": created(),
        // Triton's frontend's owner, which its clients may compare.
        "owned_by": "Triton Inference Server",
    })
}

async fn list_models(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    state.authorize(&headers)?;
    let data: Vec<_> = state
        .catalog
        .ready()
        .iter()
        .map(|spec| model_object(&spec.name))
        .collect();
    Ok(axum::Json(json!({ "object": "list", "data": data })).into_response())
}

async fn one_model(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    state.authorize(&headers)?;
    if !state.server().model_ready(&id, None) {
        return Err(ApiError::model_not_found(&id));
    }
    Ok(axum::Json(model_object(&id)).into_response())
}

/// Refuses model load and unload outside explicit model control (Triton's wording).
fn explicit_control(state: &AppState) -> ApiResult<()> {
    if state.server().repository().control_mode() == ControlMode::Explicit {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "Model load/unload requires --model-control-mode=explicit",
        ))
    }
}

/// `POST /v1/models/{name}/load` or `/unload`; any other POST under `/v1/models/` is an
/// unknown path.
async fn model_action(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let action = id
        .rsplit_once('/')
        .filter(|(name, _)| !name.is_empty() && !name.contains('/'));
    match action {
        Some((name, "load")) => load_model(state, name.to_string(), headers, body).await,
        Some((name, "unload")) => unload_model(state, name.to_string(), headers, body).await,
        _ => Err(not_found().await),
    }
}

/// `POST /v1/models/{name}/load`: loads a model that is not loaded and answers its model
/// object once it is ready; a model already loaded is a 400 (Triton's frontend loads
/// only what is not loaded; `/v2/repository/models/{name}/load` reloads).
async fn load_model(
    state: AppState,
    name: String,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    crate::body::read_body(&state, &headers, body).await?;
    explicit_control(&state)?;
    check_name(&name)?;
    let _one_at_a_time = state.catalog.management.lock().await;
    if state.server().model_ready(&name, None) {
        return Err(ApiError::invalid(format!(
            "Model '{name}' is already loaded"
        )));
    }
    state
        .server()
        .load_model(&name, LoadRequest::default())
        .await
        .map_err(|e| failed("load", &name, e))?;
    Ok(axum::Json(model_object(&name)).into_response())
}

/// `POST /v1/models/{name}/unload`: unloads a loaded model (and waits until it is
/// unloaded); one that is not loaded is a 400.
async fn unload_model(
    state: AppState,
    name: String,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    crate::body::read_body(&state, &headers, body).await?;
    explicit_control(&state)?;
    let _one_at_a_time = state.catalog.management.lock().await;
    if !state.server().model_ready(&name, None) {
        return Err(ApiError::invalid(format!("Unknown model: {name}")));
    }
    state
        .server()
        .unload_model(&name, false)
        .await
        .map_err(|e| failed("unload", &name, e))?;
    Ok(axum::Json(json!({ "status": "success", "model": name })).into_response())
}

/// Refuses a name that cannot be a model directory of the repository (empty, blank,
/// `.` or `..`, a separator or a control character) before the repository is asked,
/// with the words of Triton's frontend.
fn check_name(name: &str) -> ApiResult<()> {
    let segment = !name.trim().is_empty()
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control());
    if segment {
        Ok(())
    } else {
        Err(ApiError::invalid_param(
            "model",
            format!(
                "Invalid model name: '{name}'. Model names must be valid file-system-path \
                 segment names."
            ),
        ))
    }
}

/// A load or unload error with the model named, as Triton's frontend words it.
fn failed(what: &str, name: &str, e: nereid_core::Error) -> ApiError {
    let mut error = ApiError::from(e);
    error.message = format!("Failed to {what} model '{name}': {}", error.message);
    error
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
        detail: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_must_be_one_path_segment() {
        for good in ["mock_llm", "identity_py", "a.b", "m-1"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "  ", "\n\t", ".", "..", "a/b", "a\\b"] {
            let e = check_name(bad).expect_err(bad);
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert!(e.message.starts_with("Invalid model name"), "{}", e.message);
        }
    }
}
