//! The `X-Vertex-Ai-Triton-Redirect` header: Vertex AI only sends POSTs to the predict
//! route, so this header names the KServe route the request is meant for (without its
//! leading `/`). Triton allows exactly these: `metrics`, model statistics, a model's
//! metadata, readiness, configuration, statistics and inference, server metadata and
//! health, both shared-memory extensions and the repository extension; the method becomes
//! the one the route expects. Anything else is a bare 400, and a redirect that is not a
//! POST a bare 405. Inference keeps the Vertex AI framing; the other routes are answered
//! by the HTTP frontend's own handlers.

use std::sync::LazyLock;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use nereid_core::Error;
use regex::Regex;
use tower::ServiceExt;

use super::VertexAi;
use crate::admin::model_path;
use crate::endpoint::{self, Incoming};
use crate::error::ApiError;

/// The header naming the KServe route a predict request is meant for.
pub(super) const HEADER: &str = "x-vertex-ai-triton-redirect";

/// Triton's patterns of its KServe routes.
static MODEL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?$",
    )
    .expect("a valid pattern")
});
static SERVER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^/v2(?:/health/(live|ready))?$").expect("a valid pattern"));
static SHARED_MEMORY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)$")
        .expect("a valid pattern")
});
static REPOSITORY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))$")
        .expect("a valid pattern")
});

/// Where a redirect goes.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// The Prometheus text.
    Metrics,
    /// An inference of a model (version as in the path).
    Infer {
        model: String,
        version: Option<String>,
    },
    /// A KServe route of the HTTP frontend, with the method it expects.
    Kserve { method: Method, path: String },
    /// A route Triton refuses with this error.
    Refused(Error),
}

/// The target of redirect `endpoint` (the header's value after a `/`), in Triton's order
/// of checks; `None` for a route it does not redirect to.
fn target(endpoint: &str) -> Option<Target> {
    let get = |path: String| {
        Some(Target::Kserve {
            method: Method::GET,
            path,
        })
    };
    if endpoint == "/metrics" {
        return Some(Target::Metrics);
    }
    if endpoint == "/v2/models/stats" {
        return get(endpoint.to_string());
    }
    if let Some(c) = MODEL.captures(endpoint) {
        let model = c[1].to_string();
        let version = c.get(2).map(|v| v.as_str().to_string());
        let mut path = format!("/v2/models/{}", segment(&model));
        if let Some(v) = &version {
            path = format!("{path}/versions/{v}");
        }
        match c.get(3).map_or("", |k| k.as_str()) {
            "infer" => return Some(Target::Infer { model, version }),
            "" => return get(path),
            kind @ ("ready" | "config" | "stats") => return get(format!("{path}/{kind}")),
            // generate, generate_stream and trace/setting are not redirected.
            _ => {}
        }
    }
    if SERVER.is_match(endpoint) {
        return get(endpoint.to_string());
    }
    if let Some(c) = SHARED_MEMORY.captures(endpoint) {
        let region = c
            .get(2)
            .map(|r| format!("/region/{}", segment(r.as_str())))
            .unwrap_or_default();
        let action = &c[3];
        let method = if action == "status" {
            Method::GET
        } else {
            Method::POST
        };
        let path = format!("/v2/{}sharedmemory{region}/{action}", &c[1]);
        return Some(Target::Kserve { method, path });
    }
    if let Some(c) = REPOSITORY.captures(endpoint) {
        let named_repository = c.get(1).is_some();
        let path = match (c.get(3), c.get(4)) {
            (Some(_), _) if named_repository => {
                return Some(Target::Refused(Error::unsupported(
                    "'repository_name' specification is not supported",
                )))
            }
            (Some(model), Some(action)) => format!(
                "/v2/repository/models/{}/{}",
                segment(model.as_str()),
                action.as_str()
            ),
            // The index ignores a repository name, as Triton's does.
            _ => "/v2/repository/index".to_string(),
        };
        return Some(Target::Kserve {
            method: Method::POST,
            path,
        });
    }
    None
}

/// `text` as one percent-encoded path segment, so the KServe routes decode the very
/// name the header gave.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Answers `request`, a predict request redirected to `endpoint` (the header's value).
pub(super) async fn handle(v: &VertexAi, endpoint: &str, request: Incoming) -> Response {
    let Incoming {
        method,
        headers,
        arrival,
        body,
        ..
    } = request;
    if method != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let endpoint = format!("/{endpoint}");
    tracing::debug!("Redirecting Vertex AI request: {endpoint}");
    match target(&endpoint) {
        None => endpoint::bad_request(),
        Some(Target::Metrics) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            (v.metrics)(),
        )
            .into_response(),
        Some(Target::Refused(e)) => ApiError(e).into_response(),
        Some(Target::Infer { model, version }) => {
            let mut path = vec![("model".to_string(), model)];
            path.extend(version.map(|v| ("version".to_string(), v)));
            let answer = match model_path(&path) {
                Ok((model, version)) => {
                    v.inference
                        .infer(&model, version, &headers, arrival, body)
                        .await
                }
                Err(e) => Err(e),
            };
            answer.unwrap_or_else(|e| ApiError(e).into_response())
        }
        Some(Target::Kserve { method, path }) => {
            let mut request = Request::new(Body::from(body));
            *request.method_mut() = method;
            *request.headers_mut() = headers;
            match path.parse() {
                Ok(uri) => *request.uri_mut() = uri,
                Err(_) => return endpoint::bad_request(),
            }
            match v.kserve.clone().oneshot(request).await {
                Ok(response) => response,
                Err(infallible) => match infallible {},
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_routes_triton_redirects_to() {
        use Method as M;
        assert_eq!(target("/metrics"), Some(Target::Metrics));
        assert_eq!(
            target("/v2/models/m/versions/2/infer"),
            Some(Target::Infer {
                model: "m".into(),
                version: Some("2".into())
            })
        );
        for (endpoint, method, path) in [
            ("/v2/models/stats", M::GET, "/v2/models/stats"),
            ("/v2/models/m", M::GET, "/v2/models/m"),
            (
                "/v2/models/a b/versions/1/ready",
                M::GET,
                "/v2/models/a%20b/versions/1/ready",
            ),
            ("/v2/models/m/config", M::GET, "/v2/models/m/config"),
            ("/v2/models/m/stats", M::GET, "/v2/models/m/stats"),
            ("/v2", M::GET, "/v2"),
            ("/v2/health/live", M::GET, "/v2/health/live"),
            (
                "/v2/systemsharedmemory/status",
                M::GET,
                "/v2/systemsharedmemory/status",
            ),
            (
                "/v2/cudasharedmemory/region/r/register",
                M::POST,
                "/v2/cudasharedmemory/region/r/register",
            ),
            ("/v2/repository/r/index", M::POST, "/v2/repository/index"),
            (
                "/v2/repository/models/m/unload",
                M::POST,
                "/v2/repository/models/m/unload",
            ),
        ] {
            let expected = Target::Kserve {
                method,
                path: path.to_string(),
            };
            assert_eq!(target(endpoint), Some(expected), "{endpoint}");
        }
        assert!(matches!(
            target("/v2/repository/r/models/m/load"),
            Some(Target::Refused(e)) if e.message() == "'repository_name' specification is not supported"
        ));
        for not_redirected in [
            "/v2/models/m/generate",
            "/v2/models/m/trace/setting",
            "/v2/trace/setting",
            "/v2/logging",
            "//v2",
            "/",
            "/nothing",
        ] {
            assert_eq!(target(not_redirected), None, "{not_redirected}");
        }
    }
}
