//! The infer endpoint answered before the route table: `POST /v2/models/{m}/infer` and
//! `/v2/models/{m}/versions/{v}/infer` are nearly every request a busy server sees, and
//! through axum each one clones the boxed router, matches two nested tables, strips the
//! prefix, copies the header map and the path parameters and runs two middlewares. Here
//! the path is split by hand and the handler called with the request's own parts. What
//! this path does not answer exactly as the table would (a percent-encoded name, a
//! restricted inference group, any other route) goes on to the table.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::Extension;
use axum::http::request::Parts;
use axum::http::{Method, Request, Response, StatusCode};
use axum::response::IntoResponse;
use nereid_core::restricted::ApiGroup;

use crate::body::{read_body, BodyError};
use crate::call::{self, Framing};
use crate::error::{error_body, ApiError};
use crate::{admin, trace, AppState};

/// The infer route's state, shared by every connection.
pub(crate) struct InferRoute {
    state: AppState,
    body_limit: usize,
}

impl InferRoute {
    /// The route for `state`, or `None` when `--http-restricted-api` restricts inference
    /// (the table's guard answers those).
    pub(crate) fn new(state: AppState) -> Option<Self> {
        if state
            .options
            .restrictions
            .get(ApiGroup::Inference)
            .is_some()
        {
            return None;
        }
        let body_limit = state.options.body_limit();
        Some(Self { state, body_limit })
    }

    /// Whether `request` is an infer call this route answers.
    pub(crate) fn answers<B>(request: &Request<B>) -> bool {
        request.method() == Method::POST && infer_path(request.uri().path()).is_some()
    }

    /// Answers an infer call (one [`Self::answers`] took). The future holds the request's
    /// head, its body while it is read, then the inference under way ([`call::Running`]):
    /// nothing twice, so that with the connection's wrapper it fits one small allocation.
    pub(crate) fn answer<B>(
        self: &Arc<Self>,
        request: Request<B>,
    ) -> impl Future<Output = Response<Body>> + Send + 'static
    where
        B: http_body::Body<Data = bytes::Bytes> + Unpin + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let route = Arc::clone(self);
        let arrival = route
            .state
            .server
            .trace()
            .is_active()
            .then(|| Extension(trace::Arrival(Instant::now())));
        let (parts, body) = request.into_parts();
        async move {
            let body = match read_body(body, route.body_limit).await {
                Ok(body) => body,
                Err(e) => return buffering_failed(e),
            };
            let running = match route.start(&parts, arrival, body) {
                Ok(running) => running,
                Err(e) => return e.into_response(),
            };
            running
                .await
                .unwrap_or_else(|e| ApiError::from(e).into_response())
        }
    }

    /// Decodes and submits the inference of `parts` with `body`.
    fn start(
        &self,
        parts: &Parts,
        arrival: Option<Extension<trace::Arrival>>,
        body: bytes::Bytes,
    ) -> Result<call::Running, ApiError> {
        let Some((model, version)) = infer_path(parts.uri.path()) else {
            return Err(ApiError::from(nereid_core::Error::not_found("Not Found")));
        };
        let version = admin::parse_version(version)?;
        let options = &self.state.options;
        let call = call::InferCall {
            server: &self.state.server,
            model,
            version,
            headers: &parts.headers,
            arrival,
            max_input_size: options.max_input_size,
            framing: Framing::Kserve,
            header_forward: options.header_forward.as_deref(),
        };
        Ok(call::infer(call, body)?)
    }
}

/// The answer axum's body extractor gives when the body cannot be read, in Triton's JSON
/// error shape (the table's responses get it from `error::json_rejections`).
fn buffering_failed(e: BodyError) -> Response<Body> {
    match e {
        BodyError::TooLarge => error_body(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Failed to buffer the request body: length limit exceeded",
        ),
        BodyError::Failed(e) => error_body(
            StatusCode::BAD_REQUEST,
            &format!("Failed to buffer the request body: {e}"),
        ),
    }
}

/// `(model, version)` of `/v2/models/{model}[/versions/{version}]/infer`; `None` for any
/// other path and for names the table would decode first (percent-encoded).
fn infer_path(path: &str) -> Option<(&str, Option<&str>)> {
    let rest = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    // Searched as bytes: a `char` pattern's searcher costs more than these short paths.
    let bytes = rest.as_bytes();
    if bytes.contains(&b'%') {
        return None;
    }
    let (model, version) = match bytes.iter().position(|&b| b == b'/') {
        None => (rest, None),
        Some(slash) => {
            // Both sides of an ASCII '/' are character boundaries.
            let version = rest.get(slash + 1..)?.strip_prefix("versions/")?;
            (!version.as_bytes().contains(&b'/')).then_some(())?;
            (rest.get(..slash)?, Some(version))
        }
    };
    (!model.is_empty()).then_some((model, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_infer_paths_match() {
        assert_eq!(infer_path("/v2/models/m/infer"), Some(("m", None)));
        assert_eq!(
            infer_path("/v2/models/m/versions/3/infer"),
            Some(("m", Some("3")))
        );
        // The version is checked by the handler, as through the table.
        assert_eq!(
            infer_path("/v2/models/m/versions/x/infer"),
            Some(("m", Some("x")))
        );
        for other in [
            "/v2/models/m/ready",
            "/v2/models//infer",
            "/v2/models/m/x/infer",
            "/v2/models/m/versions/1/2/infer",
            "/v2/models/a%2Fb/infer",
            "/v2/models/m/infer/",
            "/v2/models/m/generate",
        ] {
            assert_eq!(infer_path(other), None, "{other}");
        }
    }
}
