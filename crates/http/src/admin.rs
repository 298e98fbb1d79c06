//! Every endpoint but infer: health, metadata, config, statistics, repository.

use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use bytes::Bytes;
use nereid_core::repository::{LoadRequest, FILE_PREFIX};
use nereid_core::server::IndexDocument;
use nereid_core::{Error, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::infer::json_too_large;
use crate::AppState;

/// Model name and optional version from the matched path.
pub(crate) fn model_path(path: &[(String, String)]) -> Result<(String, Option<i64>)> {
    let find = |key: &str| path.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    let model = find("model").unwrap_or_default().to_string();
    Ok((model, parse_version(find("version"))?))
}

/// A path's version segment: digits only, else Triton's 404.
pub(crate) fn parse_version(version: Option<&str>) -> Result<Option<i64>> {
    match version {
        None => Ok(None),
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v
            .parse::<i64>()
            .map(Some)
            .map_err(|_| Error::not_found("Not Found")),
        Some(_) => Err(Error::not_found("Not Found")),
    }
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
    Json(s.server.server_metadata_json())
}

pub(crate) async fn model_metadata(
    State(s): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let (model, version) = model_path(&path)?;
    Ok(Json(s.server.model_metadata_json(&model, version)?))
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
    Ok(Json(s.server.model_config_json(&model, version)?))
}

pub(crate) async fn model_stats(
    State(s): State<AppState>,
    Path(path): Path<Vec<(String, String)>>,
) -> ApiResult<Json<Value>> {
    let (model, version) = model_path(&path)?;
    Ok(Json(s.server.statistics_json(Some(&model), version)?))
}

pub(crate) async fn all_stats(State(s): State<AppState>) -> ApiResult<Json<Value>> {
    Ok(Json(s.server.statistics_json(None, None)?))
}

/// Refuses a JSON request whose declared length passes `--http-max-input-size` before its
/// body is read, with Triton's message (a body without a length meets the route's body
/// limit instead). Triton checks every JSON endpoint so; the infer and generate routes
/// check their JSON part themselves, as their binary tail does not count.
pub(crate) async fn limit_json_length(
    State(max_input_size): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    match declared {
        Some(length) if length > max_input_size => {
            ApiError(json_too_large(length, max_input_size)).into_response()
        }
        _ => next.run(request).await,
    }
}

/// Parses an optional JSON body (empty means default).
pub(crate) fn optional_body<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> Result<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| Error::invalid_arg(format!("failed to parse the request JSON buffer: {e}")))
}

/// Triton's words for a repository index request whose `ready` is not a boolean.
const READY_NOT_BOOL: &str = "Invalid value for 'ready': expected a boolean";

#[derive(Deserialize, Default)]
struct IndexRequest {
    #[serde(default, deserialize_with = "ready_flag")]
    ready: bool,
}

/// `ready` as a boolean, any other JSON value refused in Triton's words (a value nested
/// 250,000 arrays deep is refused at its first bracket, never walked); malformed JSON
/// keeps the parser's own message.
fn ready_flag<'de, D: serde::Deserializer<'de>>(value: D) -> std::result::Result<bool, D::Error> {
    value.deserialize_any(ReadyFlag)
}

/// The visitor of [`ready_flag`].
struct ReadyFlag;

impl ReadyFlag {
    fn refuse<E: serde::de::Error>(self) -> std::result::Result<bool, E> {
        Err(E::custom(READY_NOT_BOOL))
    }
}

impl<'de> serde::de::Visitor<'de> for ReadyFlag {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a boolean")
    }
    fn visit_bool<E>(self, v: bool) -> std::result::Result<bool, E> {
        Ok(v)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> std::result::Result<bool, E> {
        self.refuse()
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> std::result::Result<bool, E> {
        self.refuse()
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> std::result::Result<bool, E> {
        self.refuse()
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> std::result::Result<bool, E> {
        self.refuse()
    }
    fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<bool, E> {
        self.refuse()
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> std::result::Result<bool, A::Error> {
        self.refuse()
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> std::result::Result<bool, A::Error> {
        self.refuse()
    }
}

pub(crate) async fn repository_index(
    State(s): State<AppState>,
    body: Bytes,
) -> ApiResult<Json<Vec<IndexDocument>>> {
    let request: IndexRequest = optional_body(&body).map_err(|e| {
        if e.message().contains(READY_NOT_BOOL) {
            Error::invalid_arg(READY_NOT_BOOL)
        } else {
            e
        }
    })?;
    Ok(Json(s.server.repository_index_json(request.ready).await?))
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
    s.server.load_model(&model, load).await?;
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
    s.server.unload_model(&model, unload_dependents).await?;
    Ok(StatusCode::OK.into_response())
}
