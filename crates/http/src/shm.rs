//! The shared-memory extensions' endpoints: status, register and unregister, for system
//! (`/v2/systemsharedmemory`) and CUDA (`/v2/cudasharedmemory`) regions.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use bytes::Bytes;
use nereid_core::shm::RegionKind;
use nereid_core::{Error, Result};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::AppState;

/// The routes of both extensions.
pub(crate) fn routes() -> Router<AppState> {
    let kinds = [
        ("/v2/systemsharedmemory", RegionKind::System),
        ("/v2/cudasharedmemory", RegionKind::Cuda),
    ];
    let mut router = Router::new();
    for (prefix, kind) in kinds {
        router = router
            .route(
                &format!("{prefix}/status"),
                get(move |State(s): State<AppState>| async move { status(&s, kind, None) }),
            )
            .route(
                &format!("{prefix}/region/{{region}}/status"),
                get(
                    move |State(s): State<AppState>, Path(name): Path<String>| async move {
                        status(&s, kind, Some(&name))
                    },
                ),
            )
            .route(
                &format!("{prefix}/register"),
                post(move |State(s): State<AppState>| async move {
                    s.server.shm_client_access()?;
                    ApiResult::<StatusCode>::Err(ApiError(kind.name_required()))
                }),
            )
            .route(
                &format!("{prefix}/unregister"),
                post(move |State(s): State<AppState>| async move {
                    s.server.shm_unregister(kind, None)?;
                    ApiResult::Ok(StatusCode::OK)
                }),
            )
            .route(
                &format!("{prefix}/region/{{region}}/unregister"),
                post(
                    move |State(s): State<AppState>, Path(name): Path<String>| async move {
                        s.server.shm_unregister(kind, Some(&name))?;
                        ApiResult::Ok(StatusCode::OK)
                    },
                ),
            );
    }
    router
        .route(
            "/v2/systemsharedmemory/region/{region}/register",
            post(register_system),
        )
        .route(
            "/v2/cudasharedmemory/region/{region}/register",
            post(register_cuda),
        )
}

fn status(s: &AppState, kind: RegionKind, name: Option<&str>) -> ApiResult<Json<Value>> {
    Ok(Json(s.server.shm_status_json(kind, name)?))
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| Error::invalid_arg(format!("failed to parse the request JSON buffer: {e}")))
}

fn required<T>(value: Option<T>, field: &str) -> Result<T> {
    value.ok_or_else(|| {
        Error::invalid_arg(format!(
            "Shared memory register request has no '{field}' field"
        ))
    })
}

#[derive(Deserialize)]
struct SystemRegister {
    key: Option<String>,
    #[serde(default)]
    offset: u64,
    byte_size: Option<u64>,
}

async fn register_system(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    s.server.shm_client_access()?;
    let request: SystemRegister = parse(&body)?;
    let key = required(request.key, "key")?;
    let byte_size = required(request.byte_size, "byte_size")?;
    s.server
        .shm_register_system(&name, &key, request.offset, byte_size)?;
    Ok(StatusCode::OK)
}

/// `{"b64": "..."}`, the protocol's way of carrying bytes in JSON.
#[derive(Deserialize)]
struct Base64Bytes {
    b64: String,
}

#[derive(Deserialize)]
struct CudaRegister {
    raw_handle: Option<Base64Bytes>,
    #[serde(default)]
    device_id: u32,
    byte_size: Option<u64>,
}

async fn register_cuda(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    s.server.shm_client_access()?;
    let request: CudaRegister = parse(&body)?;
    let handle = required(request.raw_handle, "raw_handle")?;
    let byte_size = required(request.byte_size, "byte_size")?;
    let handle = base64::engine::general_purpose::STANDARD
        .decode(handle.b64.as_bytes())
        .map_err(|_| nereid_core::shm::bad_handle(&name))?;
    s.server
        .shm_register_cuda(&name, &handle, i64::from(request.device_id), byte_size)?;
    Ok(StatusCode::OK)
}
