//! The Vertex AI endpoint (`--allow-vertex-ai`, on by default under
//! `AIP_MODE=PREDICTION`), as tritonserver 2.51 serves it: the health route
//! (`AIP_HEALTH_ROUTE`) answers the server's readiness, and the predict route
//! (`AIP_PREDICT_ROUTE`) runs the default model with a KServe v2 request, or, with an
//! `X-Vertex-Ai-Triton-Redirect` header, the KServe route that header names
//! ([`redirect`]). Both routes are regular expressions that must match the whole path,
//! as in Triton. Request bodies carry the JSON length of binary tensor data in the
//! `Content-Type` (`application/vnd.vertex-ai-triton.binary+json;json-header-size=N`);
//! answers use KServe's `Inference-Header-Content-Length`, as Triton's do.

mod redirect;

use std::sync::Arc;

use axum::http::Method;
use axum::response::{IntoResponse, Response};
use nereid_core::{Error, Result, Server};
use regex::Regex;

use crate::endpoint::{self, Dispatch, EndpointOptions, Health, Incoming, Inference};
use crate::error::{method_not_allowed, ApiError};

/// The `Content-Type` prefix of a body with binary tensor data; the JSON's length follows.
pub const BINARY_CONTENT_TYPE: &str =
    "application/vnd.vertex-ai-triton.binary+json;json-header-size=";

/// The Prometheus text the `metrics` redirect answers, rendered per request.
pub type MetricsText = Arc<dyn Fn() -> String + Send + Sync>;

/// Vertex AI endpoint settings (the binary reads the routes from Vertex AI's environment).
#[derive(Clone, Default)]
pub struct VertexAiOptions {
    /// Input limit and connection limits, as on the HTTP port.
    pub endpoint: EndpointOptions,
    /// `AIP_PREDICT_ROUTE`: the pattern of the predict route (required).
    pub predict_route: Option<String>,
    /// `AIP_HEALTH_ROUTE`: the pattern of the health route (required).
    pub health_route: Option<String>,
    /// `--vertex-ai-default-model`: the model the predict route runs; without it the
    /// repository must hold exactly one ready model.
    pub default_model: Option<String>,
    /// What the `metrics` redirect answers (the server's own metrics when `None`).
    pub metrics: Option<MetricsText>,
}

/// The endpoint's state.
struct VertexAi {
    inference: Inference,
    predict: Regex,
    health: Regex,
    default_model: String,
    metrics: MetricsText,
    /// The KServe routes the redirect header reaches (no restrictions, no forwarding, as
    /// Triton's Vertex AI endpoint has none).
    kserve: axum::Router,
}

/// The endpoint's routes, to serve with [`crate::serve_router`]. Fails as Triton's
/// start-up does: a route not given, or no default model to be had (none named and not
/// exactly one ready model, or the one named not ready).
pub async fn router(server: Arc<Server>, options: VertexAiOptions) -> Result<axum::Router> {
    let predict = route(
        options.predict_route.as_deref(),
        "AIP_PREDICT_ROUTE",
        // Triton's message misspells the variable.
        "API_PREDICT_ROUTE",
    )?;
    let health = route(
        options.health_route.as_deref(),
        "AIP_HEALTH_ROUTE",
        "AIP_HEALTH_ROUTE",
    )?;
    let default_model = default_model(&server, options.default_model).await?;
    let metrics = options.metrics.unwrap_or_else(|| {
        let server = server.clone();
        Arc::new(move || server.metrics_text())
    });
    let kserve = crate::router(
        server.clone(),
        crate::HttpOptions {
            max_input_size: options.endpoint.max_input_size,
            limits: options.endpoint.limits,
            restrictions: Arc::default(),
            header_forward: None,
        },
    );
    let state = Arc::new(VertexAi {
        inference: Inference::new(server.clone(), &options.endpoint, BINARY_CONTENT_TYPE),
        predict,
        health,
        default_model,
        metrics,
        kserve,
    });
    Ok(endpoint::router(server, &options.endpoint, state))
}

/// A route pattern matching whole paths. An invalid pattern fails the start-up (Triton
/// starts, and the route then matches nothing).
fn route(pattern: Option<&str>, variable: &str, in_message: &str) -> Result<Regex> {
    let pattern = pattern.filter(|p| !p.is_empty()).ok_or_else(|| {
        Error::invalid_arg(format!(
            "{in_message} is not defined for Vertex AI endpoint"
        ))
    })?;
    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
        Error::invalid_arg(format!(
            "{variable} '{pattern}' is not a valid regular expression: {e}"
        ))
    })
}

/// The named model if it is ready, else the only ready model, with Triton's messages.
async fn default_model(server: &Server, named: Option<String>) -> Result<String> {
    let Some(named) = named else {
        return endpoint::sole_ready_model(server).await?.ok_or_else(|| {
            Error::invalid_arg(
                "Expect the model repository contains only a single model if default model is not specified",
            )
        });
    };
    let ready = server.repository_index(true).await?;
    if ready.iter().any(|entry| entry.name == named) {
        Ok(named)
    } else {
        Err(Error::invalid_arg(format!(
            "Expect the default model '{named}' is loaded"
        )))
    }
}

impl Dispatch for VertexAi {
    /// Triton's dispatch: the health route, then the predict route (redirected when the
    /// header is there); any other path is a bare 400.
    async fn dispatch(&self, request: Incoming) -> Response {
        let path = request.uri.path();
        tracing::debug!("Vertex AI request: {} {path}", request.method);
        if self.health.is_match(path) {
            return endpoint::health(&self.inference.server, &request.method, Health::Ready).await;
        }
        if !self.predict.is_match(path) {
            return endpoint::bad_request();
        }
        if let Some(target) = request.headers.get(redirect::HEADER) {
            let target = String::from_utf8_lossy(target.as_bytes()).into_owned();
            return redirect::handle(self, &target, request).await;
        }
        if request.method != Method::POST {
            return method_not_allowed().await;
        }
        let Incoming {
            headers,
            arrival,
            body,
            ..
        } = request;
        self.inference
            .infer(&self.default_model, None, &headers, arrival, body)
            .await
            .unwrap_or_else(|e| ApiError(e).into_response())
    }
}

#[cfg(test)]
mod tests;
