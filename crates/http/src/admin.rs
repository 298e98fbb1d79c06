//! Every endpoint but infer: health, metadata, config, statistics, repository.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use bytes::Bytes;
use nereid_core::repository::{LoadRequest, FILE_PREFIX};
use nereid_core::stats::{ModelStatsSnapshot, StatDuration};
use nereid_core::{Error, Result};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// Model name and optional version from the matched path.
pub(crate) fn model_path(path: &[(String, String)]) -> Result<(String, Option<i64>)> {
    let find = |key: &str| path.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let model = find("model").unwrap_or_default().to_string();
    let version = match find("version") {
        None => None,
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => Some(
            v.parse::<i64>()
                .map_err(|_| Error::not_found("Not Found"))?,
        ),
        Some(_) => return Err(Error::not_found("Not Found")),
    };
    Ok((model, version))
}

fn ok_or_400(ok: bool) -> StatusCode {
    if ok {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    }
}

pub(crate) async fn live(State(s): State<AppState>) -> StatusCode {
    ok_or_400(s.server.is_live())
}

pub(crate) async fn ready(State(s): State<AppState>) -> StatusCode {
    ok_or_400(s.server.is_ready())
}

pub(crate) async fn server_metadata(State(s): State<AppState>) -> Json<Value> {
    let id = s.server.identity();
    Json(json!({
        "name": id.name,
        "version": id.version,
        "extensions": nereid_core::server::EXTENSIONS,
    }))
}

pub(crate) async fn model_metadata(
    State(s): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let (model, version) = model_path(&path)?;
    let m = s.server.model_metadata(&model, version)?;
    let tensors = |list: &[nereid_core::server::TensorMetadata]| -> Vec<Value> {
        list.iter()
            .map(|t| json!({"name": t.name, "datatype": t.datatype.as_str(), "shape": t.shape}))
            .collect()
    };
    Ok(Json(json!({
        "name": m.name,
        "versions": m.versions,
        "platform": m.platform,
        "inputs": tensors(&m.inputs),
        "outputs": tensors(&m.outputs),
    })))
}

pub(crate) async fn model_ready(
    State(s): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
) -> ApiResult<StatusCode> {
    let (model, version) = model_path(&path)?;
    if s.server.model_ready(&model, version) {
        Ok(StatusCode::OK)
    } else {
        Err(ApiError(Error::invalid_arg("Model version not ready")))
    }
}

pub(crate) async fn model_config(
    State(s): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let (model, version) = model_path(&path)?;
    Ok(Json(s.server.model_config(&model, version)?.json.clone()))
}

fn duration(d: StatDuration) -> Value {
    json!({"count": d.count, "ns": d.ns})
}

/// Triton's statistics JSON for one model version.
fn stats_json(s: &ModelStatsSnapshot) -> Value {
    let i = &s.inference_stats;
    json!({
        "name": s.name,
        "version": s.version.to_string(),
        "last_inference": s.last_inference,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {
            "success": duration(i.success),
            "fail": duration(i.fail),
            "queue": duration(i.queue),
            "compute_input": duration(i.compute_input),
            "compute_infer": duration(i.compute_infer),
            "compute_output": duration(i.compute_output),
            "cache_hit": duration(i.cache_hit),
            "cache_miss": duration(i.cache_miss),
        },
        "response_stats": {},
        "batch_stats": s.batch_stats.iter().map(|b| json!({
            "batch_size": b.batch_size,
            "compute_input": duration(b.compute_input),
            "compute_infer": duration(b.compute_infer),
            "compute_output": duration(b.compute_output),
        })).collect::<Vec<_>>(),
        "memory_usage": [],
    })
}

pub(crate) async fn model_stats(
    State(s): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let (model, version) = model_path(&path)?;
    let stats = s.server.statistics(Some(&model), version)?;
    Ok(Json(
        json!({"model_stats": stats.iter().map(stats_json).collect::<Vec<_>>()}),
    ))
}

pub(crate) async fn all_stats(State(s): State<AppState>) -> ApiResult<Json<Value>> {
    let stats = s.server.statistics(None, None)?;
    Ok(Json(
        json!({"model_stats": stats.iter().map(stats_json).collect::<Vec<_>>()}),
    ))
}

/// Parses an optional JSON body (empty means default).
fn optional_body<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> Result<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| Error::invalid_arg(format!("failed to parse the request JSON buffer: {e}")))
}

#[derive(Deserialize, Default)]
struct IndexRequest {
    #[serde(default)]
    ready: bool,
}

pub(crate) async fn repository_index(
    State(s): State<AppState>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let request: IndexRequest = optional_body(&body)?;
    let entries = s.server.repository().index(request.ready).await?;
    Ok(Json(Value::Array(
        entries
            .into_iter()
            .map(|e| {
                let mut v = json!({"name": e.name});
                if let Some(version) = e.version {
                    v["version"] = json!(version.to_string());
                }
                if let Some(state) = e.state {
                    v["state"] = json!(state.as_str());
                }
                if !e.reason.is_empty() {
                    v["reason"] = json!(e.reason);
                }
                v
            })
            .collect(),
    )))
}

#[derive(Deserialize, Default)]
struct RepositoryRequest {
    #[serde(default)]
    parameters: serde_json::Map<String, Value>,
}

pub(crate) async fn load(
    State(s): State<AppState>,
    Path(model): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let request: RepositoryRequest = optional_body(&body)?;
    let mut load = LoadRequest::default();
    for (key, value) in &request.parameters {
        if key == "config" {
            load.config = Some(value.as_str().map(str::to_owned).ok_or_else(|| {
                ApiError(Error::invalid_arg(
                    "the 'config' parameter must be a string holding the JSON model configuration",
                ))
            })?);
        } else if key.starts_with(FILE_PREFIX) {
            load.files
                .push((key.clone(), file_content(&model, key, value)?));
        }
    }
    s.server.repository().load(&model, load).await?;
    Ok(StatusCode::OK.into_response())
}

/// The bytes of a `file:` parameter: base64 text over HTTP.
fn file_content(model: &str, key: &str, value: &Value) -> Result<Bytes> {
    let invalid = |why: String| {
        Error::invalid_arg(format!(
            "failed to load '{model}', failed to poll from model repository: File parameter '{key}' {why}"
        ))
    };
    let text = value
        .as_str()
        .ok_or_else(|| invalid("must hold the file's content as base64 text".into()))?;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(Bytes::from)
        .map_err(|e| invalid(format!("is not valid base64: {e}")))
}

pub(crate) async fn unload(
    State(s): State<AppState>,
    Path(model): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let request: RepositoryRequest = optional_body(&body)?;
    let unload_dependents = match request.parameters.get("unload_dependents") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| {
            ApiError(Error::invalid_arg(
                "Unable to parse 'unload_dependents': attempt to access JSON non-boolean as boolean",
            ))
        })?,
    };
    s.server
        .repository()
        .unload(&model, unload_dependents)
        .await?;
    Ok(StatusCode::OK.into_response())
}
