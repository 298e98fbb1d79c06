//! What the SageMaker and Vertex AI endpoints share beyond the infer call: settings, the
//! route table around one dispatching handler (their paths are Triton's regular
//! expressions, not a fixed route table), the health answer and the model a request
//! without a model name goes to.

use std::future::Future;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use nereid_core::{Result, Server};

use crate::call::{self, Framing, InferCall};
use crate::error::method_not_allowed;
use crate::trace::{self, Arrival};

/// Settings a SageMaker or Vertex AI port shares with the HTTP port. Triton gives these
/// endpoints neither restricted APIs nor header forwarding.
#[derive(Debug, Clone, Copy)]
pub struct EndpointOptions {
    /// `--http-max-input-size`: the largest JSON and raw input of a request.
    pub max_input_size: usize,
    /// Connection cap and timeouts for the port.
    pub limits: nereid_net::Limits,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        Self {
            max_input_size: crate::DEFAULT_MAX_INPUT_SIZE,
            limits: nereid_net::Limits::default(),
        }
    }
}

/// How an endpoint runs inferences: on the facade, with its input limit and the
/// `Content-Type` prefix that frames its binary bodies.
pub(crate) struct Inference {
    pub(crate) server: Arc<Server>,
    max_input_size: usize,
    content_type: &'static str,
}

impl Inference {
    /// Inferences on `server` under `options`, binary bodies framed by `content_type`.
    pub(crate) fn new(
        server: Arc<Server>,
        options: &EndpointOptions,
        content_type: &'static str,
    ) -> Self {
        Self {
            server,
            max_input_size: options.max_input_size,
            content_type,
        }
    }

    /// Runs `model` (its latest version when `version` is `None`) on `body`.
    pub(crate) async fn infer(
        &self,
        model: &str,
        version: Option<i64>,
        headers: &HeaderMap,
        arrival: Option<Extension<Arrival>>,
        body: Bytes,
    ) -> Result<Response> {
        let call = InferCall {
            server: &self.server,
            model,
            version,
            headers,
            arrival,
            max_input_size: self.max_input_size,
            framing: Framing::ContentType(self.content_type),
            header_forward: None,
        };
        call::infer(call, body)?.await
    }
}

/// Which health a health route reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Health {
    /// Liveness (`/v2/health/live`).
    Live,
    /// Readiness (`/v2/health/ready`), the default.
    #[default]
    Ready,
}

impl Health {
    /// Triton's reading of a health mode (`SAGEMAKER_TRITON_PING_MODE`): `live` is
    /// liveness, anything else readiness.
    pub fn from_mode(mode: &str) -> Self {
        if mode == "live" {
            Self::Live
        } else {
            Self::Ready
        }
    }
}

/// Triton's `HandleServerHealth`: GET only (405 with its JSON error otherwise), 200 when
/// healthy and a bare 400 when not.
pub(crate) async fn health(server: &Server, method: &Method, health: Health) -> Response {
    if method != Method::GET {
        return method_not_allowed().await;
    }
    let healthy = match health {
        Health::Live => server.is_live(),
        Health::Ready => server.is_ready(),
    };
    if healthy {
        StatusCode::OK.into_response()
    } else {
        bad_request()
    }
}

/// Triton's answer to a path these endpoints do not serve: 400 without a body.
pub(crate) fn bad_request() -> Response {
    StatusCode::BAD_REQUEST.into_response()
}

/// The model an endpoint without a model in its path serves when none is named: the
/// only entry of the ready repository index, as Triton's Vertex AI endpoint picks it
/// (two ready versions of one model are two entries, hence none).
pub(crate) async fn sole_ready_model(server: &Server) -> Result<Option<String>> {
    let mut ready = server.repository_index(true).await?;
    Ok(match ready.len() {
        1 => ready.pop().map(|entry| entry.name),
        _ => None,
    })
}

/// A request as the SageMaker and Vertex AI dispatchers read it.
pub(crate) struct Incoming {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) headers: HeaderMap,
    /// When it arrived, if stamped for tracing.
    pub(crate) arrival: Option<Extension<Arrival>>,
    pub(crate) body: Bytes,
}

/// An endpoint that answers every request from its own dispatch (its paths are Triton's
/// regular expressions, not a fixed route table).
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// The answer to `request`.
    fn dispatch(&self, request: Incoming) -> impl Future<Output = Response> + Send;
}

async fn dispatch<D: Dispatch>(
    State(endpoint): State<Arc<D>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    arrival: Option<Extension<Arrival>>,
    body: Bytes,
) -> Response {
    let request = Incoming {
        method,
        uri,
        headers,
        arrival,
        body,
    };
    endpoint.dispatch(request).await
}

/// A router that sends every request to `endpoint`, with the HTTP port's body limit,
/// JSON rejections and trace stamping.
pub(crate) fn router<D: Dispatch>(
    server: Arc<Server>,
    options: &EndpointOptions,
    endpoint: Arc<D>,
) -> Router {
    let body_limit = crate::body_limit(options.max_input_size);
    Router::new()
        .fallback(dispatch::<D>)
        .layer(axum::middleware::from_fn_with_state(
            server,
            trace::stamp_arrival,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::map_response(
            crate::error::json_rejections,
        ))
        .with_state(endpoint)
}

/// Driving the endpoints' routers in tests.
#[cfg(test)]
pub(crate) mod testing {
    use axum::body::{to_bytes, Body};
    use axum::http::{HeaderMap, Request, StatusCode};
    use axum::Router;
    use bytes::Bytes;
    use tower::ServiceExt;

    /// A model the test backend serves: one FP32 input of two elements, echoed.
    pub(crate) const CONFIG: &str = r#"backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]"#;

    /// A JSON request for [`CONFIG`]'s model.
    pub(crate) const JSON: &str =
        r#"{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","data":[1.5,2.5]}]}"#;

    /// The same request with its input as binary data and the output asked in binary,
    /// and the length of its JSON part.
    pub(crate) fn binary_request() -> (Vec<u8>, usize) {
        let json = br#"{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}"#;
        let mut body = json.to_vec();
        for x in [1.5f32, 2.5] {
            body.extend_from_slice(&x.to_le_bytes());
        }
        (body, json.len())
    }

    /// One request through `router`: status, headers and body.
    pub(crate) async fn send(
        router: &Router,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> (StatusCode, HeaderMap, Bytes) {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(body.into()).expect("a valid request");
        let response = router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let (status, headers) = (response.status(), response.headers().clone());
        let body = to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a buffered body");
        (status, headers, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_live_means_liveness() {
        assert_eq!(Health::from_mode("live"), Health::Live);
        assert_eq!(Health::from_mode("ready"), Health::Ready);
        assert_eq!(Health::from_mode("LIVE"), Health::Ready);
    }
}
