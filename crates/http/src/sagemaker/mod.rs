//! The SageMaker endpoint (`--allow-sagemaker`), as tritonserver 2.51 serves it:
//! `GET /ping` answers the server's readiness (or liveness), `POST /invocations` runs the
//! default model with a KServe v2 request, and the multi-model endpoint under `/models`
//! loads model archives at run time ([`models`]); with `SAGEMAKER_TRITON_INFERENCE_TYPE`
//! set to `generate` or `generate_stream`, `/invocations` runs the generate extension. Bodies carry binary tensor data with
//! the JSON length in the `Content-Type`
//! (`application/vnd.sagemaker-triton.binary+json;json-header-size=N`), and answers
//! announce it the same way.

mod archive;
mod models;

use std::sync::{Arc, LazyLock};

use axum::extract::Extension;
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use nereid_core::{Result, Server};
use regex::Regex;

use crate::endpoint::{self, Dispatch, EndpointOptions, Health, Incoming, Inference};
use crate::error::{method_not_allowed, ApiError};
use crate::generate::{self, GenerateCall};
use crate::infer::HEADER_LENGTH;
use crate::trace::Arrival;

/// The `Content-Type` prefix of a body with binary tensor data; the JSON's length follows.
pub const BINARY_CONTENT_TYPE: &str =
    "application/vnd.sagemaker-triton.binary+json;json-header-size=";

/// The model `/invocations` runs when `SAGEMAKER_TRITON_DEFAULT_MODEL_NAME` is unset and
/// the repository does not hold exactly one ready model (Triton's placeholder, which no
/// model has, so such a request fails with the unknown-model error).
pub const UNSPECIFIED_MODEL: &str = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME";

/// Triton's path pattern of the multi-model endpoint: `/models`, `/models/<name>` and
/// `/models/<name>/invoke`.
static MODELS_PATH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^/models(?:/)?([^/]+)?(/invoke)?$").expect("a valid pattern"));

/// SageMaker endpoint settings (the binary reads them from SageMaker's environment).
#[derive(Debug, Clone, Default)]
pub struct SagemakerOptions {
    /// Input limit and connection limits, as on the HTTP port.
    pub endpoint: EndpointOptions,
    /// `SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`: the model `/invocations` runs.
    pub default_model: Option<String>,
    /// `SAGEMAKER_TRITON_PING_MODE`: what `/ping` reports (readiness by default).
    pub ping: Health,
    /// `SAGEMAKER_TRITON_INFERENCE_TYPE`: what `/invocations` runs.
    pub inference_type: InferenceType,
}

/// What `/invocations` runs on the default model (`SAGEMAKER_TRITON_INFERENCE_TYPE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InferenceType {
    /// A KServe v2 inference (`infer`, the default).
    #[default]
    Infer,
    /// The generate extension, one JSON answer (`generate`).
    Generate,
    /// The generate extension, server-sent events (`generate_stream`).
    GenerateStream,
}

impl InferenceType {
    /// The type `SAGEMAKER_TRITON_INFERENCE_TYPE` names (unset: `infer`); another value
    /// stops start-up, as Triton's SageMaker start-up script refuses it.
    pub fn from_env(value: Option<&str>) -> std::result::Result<Self, String> {
        match value.unwrap_or("infer") {
            "infer" => Ok(Self::Infer),
            "generate" => Ok(Self::Generate),
            "generate_stream" => Ok(Self::GenerateStream),
            other => Err(format!(
                "Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{other}': must be one of: infer, generate, generate_stream"
            )),
        }
    }
}

/// The endpoint's state: the facade, its settings and the multi-model endpoint's list.
struct Sagemaker {
    inference: Inference,
    default_model: String,
    ping: Health,
    inference_type: InferenceType,
    max_input_size: usize,
    models: models::ModelList,
}

/// The endpoint's routes, to serve with [`crate::serve_router`]. The default model is resolved now, after the models loaded:
/// the one `SAGEMAKER_TRITON_DEFAULT_MODEL_NAME` names, else the only ready model (what
/// Triton's SageMaker start-up script picks), else Triton's placeholder.
pub async fn router(server: Arc<Server>, options: SagemakerOptions) -> Result<axum::Router> {
    let default_model = match options.default_model {
        Some(model) => model,
        None => endpoint::sole_ready_model(&server)
            .await?
            .unwrap_or_else(|| UNSPECIFIED_MODEL.to_string()),
    };
    let state = Arc::new(Sagemaker {
        inference: Inference::new(server.clone(), &options.endpoint, BINARY_CONTENT_TYPE),
        default_model,
        ping: options.ping,
        inference_type: options.inference_type,
        max_input_size: options.endpoint.max_input_size,
        models: models::ModelList::default(),
    });
    Ok(endpoint::router(server, &options.endpoint, state))
}

impl Dispatch for Sagemaker {
    /// Triton's dispatch: the path decides, then the method; a path it does not know is
    /// a bare 400.
    async fn dispatch(&self, request: Incoming) -> Response {
        let Incoming {
            method,
            uri,
            headers,
            arrival,
            body,
        } = request;
        let path = uri.path();
        tracing::debug!("SageMaker request: {method} {path}");
        if path == "/ping" {
            return endpoint::health(&self.inference.server, &method, self.ping).await;
        }
        if path == "/invocations" {
            if method != Method::POST {
                return method_not_allowed().await;
            }
            let stream = match self.inference_type {
                InferenceType::Infer => {
                    return infer(self, &self.default_model, &headers, arrival, body)
                        .await
                        .unwrap_or_else(|e| ApiError(e).into_response())
                }
                InferenceType::Generate => false,
                InferenceType::GenerateStream => true,
            };
            let call = GenerateCall {
                server: &self.inference.server,
                model: &self.default_model,
                version: None,
                max_input_size: self.max_input_size,
                stream,
            };
            return generate::answer(call, &headers, arrival, body)
                .await
                .into_response();
        }
        let Some(captures) = MODELS_PATH.captures(path) else {
            return endpoint::bad_request();
        };
        let name = captures.get(1).map_or("", |m| m.as_str());
        let invoke = captures.get(2).is_some();
        match method {
            Method::GET if name.is_empty() => models::list(self),
            Method::GET => models::get(self, name),
            Method::POST if invoke => models::invoke(self, name, &headers, arrival, body).await,
            Method::POST => models::load(self, &headers, &body).await,
            Method::DELETE => models::unload(self, name, &headers).await,
            _ => endpoint::bad_request(),
        }
    }
}

/// Runs `model` on a SageMaker-framed body and answers in SageMaker's framing.
async fn infer(
    s: &Sagemaker,
    model: &str,
    headers: &HeaderMap,
    arrival: Option<Extension<Arrival>>,
    body: Bytes,
) -> Result<Response> {
    let mut response = s
        .inference
        .infer(model, None, headers, arrival, body)
        .await?;
    announce_json_length(response.headers_mut());
    Ok(response)
}

/// SageMaker announces the JSON length of an answer with binary data in its
/// `Content-Type` instead of KServe's `Inference-Header-Content-Length`.
fn announce_json_length(headers: &mut HeaderMap) {
    let Some(length) = headers.remove(HEADER_LENGTH) else {
        return;
    };
    let mut content_type = BINARY_CONTENT_TYPE.as_bytes().to_vec();
    content_type.extend_from_slice(length.as_bytes());
    if let Ok(value) = HeaderValue::from_bytes(&content_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
}

#[cfg(test)]
mod tests;
