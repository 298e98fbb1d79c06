//! The system shared-memory extension's endpoints: status, register, unregister.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use nereid_core::shm::RegionStatus;
use nereid_core::Error;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::AppState;

fn status_json(regions: Vec<RegionStatus>) -> Json<Value> {
    Json(Value::Array(
        regions
            .into_iter()
            .map(|r| json!({"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}))
            .collect(),
    ))
}

pub(crate) async fn status_all(State(s): State<AppState>) -> ApiResult<Json<Value>> {
    Ok(status_json(s.server.shm().system_status(None)?))
}

pub(crate) async fn status_one(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(status_json(s.server.shm().system_status(Some(&name))?))
}

#[derive(Deserialize)]
struct RegisterBody {
    key: Option<String>,
    #[serde(default)]
    offset: u64,
    byte_size: Option<u64>,
}

pub(crate) async fn register(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let request: RegisterBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError(Error::invalid_arg(format!(
            "failed to parse the request JSON buffer: {e}"
        )))
    })?;
    let key = request.key.ok_or_else(|| {
        ApiError(Error::invalid_arg(
            "Shared memory register request has no 'key' field",
        ))
    })?;
    let byte_size = request.byte_size.ok_or_else(|| {
        ApiError(Error::invalid_arg(
            "Shared memory register request has no 'byte_size' field",
        ))
    })?;
    s.server
        .shm()
        .register_system(&name, &key, request.offset, byte_size)?;
    Ok(StatusCode::OK)
}

pub(crate) async fn register_without_name() -> ApiError {
    ApiError(Error::invalid_arg(
        "'region name' is necessary to register system shared memory region",
    ))
}

pub(crate) async fn unregister_all(State(s): State<AppState>) -> StatusCode {
    s.server.shm().unregister_system(None);
    StatusCode::OK
}

pub(crate) async fn unregister_one(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> StatusCode {
    s.server.shm().unregister_system(Some(&name));
    StatusCode::OK
}
