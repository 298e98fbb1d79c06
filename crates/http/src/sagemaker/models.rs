//! SageMaker's multi-model endpoint (`SAGEMAKER_MULTI_MODEL=true`): SageMaker loads a
//! model archive with `POST /models` (`{"model_name", "url"}`), lists and describes what
//! it loaded, runs it with `POST /models/<name>/invoke` and unloads it with `DELETE`.
//! As in Triton, each archive is registered as a model repository of its own, its model
//! directory mapped to the target model's name, then loaded; unloading unloads the model
//! with its dependents and unregisters the repository. The list of loaded archives is
//! this endpoint's own, keyed by the `model_name` SageMaker sent.

use std::collections::BTreeMap;
use std::path::Path;

use axum::extract::Extension;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use nereid_core::repository::LoadRequest;
use nereid_core::{Error, ErrorKind};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use super::{archive, Sagemaker};
use crate::error::error_body;
use crate::trace::Arrival;

/// The header naming the model SageMaker means; without it the path's name is the model.
const TARGET_MODEL: &str = "x-amzn-sagemaker-target-model";

/// Texts that mark an error as the machine running out of memory or disk, which
/// SageMaker expects as 507 so that it unloads other models and retries (Triton's list).
const OUT_OF_MEMORY: &[&str] = &[
    "CUDA out of memory",
    "CUDA_OUT_OF_MEMORY",
    "Out of memory",
    "Out Of Memory",
    "out of memory",
    "MemoryError",
    "OutOfMemory",
    "OOM",
    "Dst tensor is not initialized",
    "Src tensor is not initialized",
    "CNMEM_STATUS_OUT_OF_MEMORY",
    "CUDNN_STATUS_NOT_INITIALIZED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "Failed to allocate memory",
    "failed to allocate memory",
    "No space left on device",
];

/// The archives loaded through this endpoint: SageMaker's model name → the repository
/// registered for it. Locked only to read or change the map, never across a load.
#[derive(Default)]
pub(super) struct ModelList(Mutex<BTreeMap<String, String>>);

impl ModelList {
    fn url(&self, name: &str) -> Option<String> {
        self.0.lock().get(name).cloned()
    }
}

/// The model a request means: the target-model header, else `name`.
fn target<'a>(headers: &'a HeaderMap, name: &'a str) -> &'a str {
    headers
        .get(TARGET_MODEL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(name)
}

/// SageMaker's statuses for a failed load or invocation: 507 when the machine ran out of
/// memory, else 400 (Triton keeps these endpoints off its usual status mapping).
fn failure(e: &Error) -> Response {
    let message = e.message();
    let status = if OUT_OF_MEMORY.iter().any(|oom| message.contains(oom)) {
        StatusCode::INSUFFICIENT_STORAGE
    } else {
        StatusCode::BAD_REQUEST
    };
    error_body(status, message)
}

/// 409 for a name or repository already taken, else [`failure`].
fn load_failure(e: &Error) -> Response {
    if e.kind() == ErrorKind::AlreadyExists {
        error_body(StatusCode::CONFLICT, e.message())
    } else {
        failure(e)
    }
}

/// `GET /models`: every loaded archive, as `{"modelName", "modelUrl"}`. As in Triton, an
/// archive whose model is not ready at version 1 (looked up by the listed name) is an
/// empty object.
pub(super) fn list(s: &Sagemaker) -> Response {
    let loaded = s.models.0.lock().clone();
    let models: Vec<Value> = loaded
        .into_iter()
        .map(|(name, url)| {
            if s.inference.server.model_ready(&name, Some(1)) {
                json!({"modelName": name, "modelUrl": url})
            } else {
                Value::Object(Map::new())
            }
        })
        .collect();
    Json(json!({ "models": models })).into_response()
}

/// `GET /models/<name>`: one loaded archive, or a bare 404.
pub(super) fn get(s: &Sagemaker, name: &str) -> Response {
    match s.models.url(name) {
        Some(url) => Json(json!({"modelName": name, "modelUrl": url})).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `POST /models`: registers the archive at `url` as a repository holding the target
/// model (the archive's ensemble, else its model directory) and loads it.
pub(super) async fn load(s: &Sagemaker, headers: &HeaderMap, body: &Bytes) -> Response {
    let (name, url) = match load_request(body) {
        Ok(request) => request,
        Err(e) => return error_body(StatusCode::BAD_REQUEST, e.message()),
    };
    let target = target(headers, &name).to_string();
    // Triton waits forever on a load of the empty name; a request without one is refused.
    if target.is_empty() {
        return error_body(
            StatusCode::BAD_REQUEST,
            "the request names no model: set 'model_name' or the X-Amzn-SageMaker-Target-Model header",
        );
    }
    tracing::info!("Loading SageMaker TargetModel: {target}");
    let layout = {
        let url = url.clone();
        match tokio::task::spawn_blocking(move || archive::layout(&url)).await {
            Ok(layout) => layout,
            Err(e) => {
                let e = Error::internal(format!("reading the model archive failed: {e}"));
                return error_body(StatusCode::INTERNAL_SERVER_ERROR, e.message());
            }
        }
    };
    let repository = Path::new(&layout.repository);
    let mapping = [(layout.model_dir, target.clone())];
    if let Err(e) = s
        .inference
        .server
        .register_model_repository(repository, &mapping)
        .await
    {
        return load_failure(&e);
    }
    if let Err(e) = s
        .inference
        .server
        .load_model(&target, LoadRequest::default())
        .await
    {
        if e.kind() != ErrorKind::AlreadyExists {
            if let Err(u) = s.inference.server.unregister_model_repository(repository) {
                tracing::warn!("cannot unregister {}: {u}", layout.repository);
            }
        }
        return load_failure(&e);
    }
    s.models.0.lock().entry(name).or_insert(layout.repository);
    StatusCode::OK.into_response()
}

/// The `model_name` and `url` of a load request, each empty when absent.
fn load_request(body: &[u8]) -> Result<(String, String), Error> {
    if body.is_empty() {
        return Ok((String::new(), String::new()));
    }
    let request: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| Error::invalid_arg(format!("failed to parse the request JSON buffer: {e}")))?;
    let text = |key: &str| match request.get(key) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        // Triton aborts on these.
        Some(_) => Err(Error::invalid_arg(format!(
            "Unable to parse '{key}': attempt to access JSON non-string as string"
        ))),
    };
    Ok((text("model_name")?, text("url")?))
}

/// `DELETE /models/<name>`: unloads the model and its dependents, then unregisters its
/// repository; a bare 404 for an archive not loaded here.
pub(super) async fn unload(s: &Sagemaker, name: &str, headers: &HeaderMap) -> Response {
    let target = target(headers, name);
    let Some(url) = s.models.url(name) else {
        tracing::debug!("Model {target} with model hash {name} is not loaded.");
        return StatusCode::NOT_FOUND.into_response();
    };
    tracing::info!("Unloading SageMaker TargetModel: {target}");
    if let Err(e) = s.inference.server.unload_model(target, true).await {
        return error_body(StatusCode::BAD_REQUEST, e.message());
    }
    let unregistered = s
        .inference
        .server
        .unregister_model_repository(Path::new(&url));
    s.models.0.lock().remove(name);
    match unregistered {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => error_body(StatusCode::BAD_REQUEST, e.message()),
    }
}

/// `POST /models/<name>/invoke`: runs the archive's model; a bare 404 for an archive not
/// loaded here.
pub(super) async fn invoke(
    s: &Sagemaker,
    name: &str,
    headers: &HeaderMap,
    arrival: Option<Extension<Arrival>>,
    body: Bytes,
) -> Response {
    if s.models.url(name).is_none() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let target = target(headers, name);
    tracing::debug!("Invoking SageMaker TargetModel: {target}");
    match super::infer(s, target, headers, arrival, body).await {
        Ok(response) => response,
        Err(e) => failure(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_is_507_and_the_rest_400() {
        let status = |message: &str| failure(&Error::internal(message)).status();
        assert_eq!(
            status("CUDA out of memory. Tried to allocate"),
            StatusCode::INSUFFICIENT_STORAGE
        );
        assert_eq!(
            status("write: No space left on device"),
            StatusCode::INSUFFICIENT_STORAGE
        );
        assert_eq!(status("model not found"), StatusCode::BAD_REQUEST);
        let taken = Error::new(ErrorKind::AlreadyExists, "taken");
        assert_eq!(load_failure(&taken).status(), StatusCode::CONFLICT);
    }

    #[test]
    fn load_requests_take_two_strings() {
        assert_eq!(
            load_request(br#"{"model_name":"m","url":"/x","other":1}"#).expect("valid"),
            ("m".into(), "/x".into())
        );
        assert_eq!(
            load_request(b"").expect("empty"),
            (String::new(), String::new())
        );
        assert_eq!(
            load_request(b"{}").expect("no keys"),
            (String::new(), String::new())
        );
        assert_eq!(
            load_request(br#"{"model_name":5}"#)
                .expect_err("number")
                .message(),
            "Unable to parse 'model_name': attempt to access JSON non-string as string"
        );
        assert!(load_request(b"{bad")
            .expect_err("not JSON")
            .message()
            .starts_with("failed to parse the request JSON buffer: "));
    }
}
