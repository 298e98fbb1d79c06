//! Restricted API groups of the OpenAI port (`--openai-restricted-api <apis> <header>
//! <value>`, repeatable), as Triton's frontend has them: the requests of a restricted
//! group pass only with the header set to the value; the others get a 401. The groups,
//! the endpoints each covers, the parse errors and the refusal are Triton's
//! (`openai_frontend/frontend/fastapi/middleware/api_restriction.py`). Independent of
//! `--openai-api-key`, which every request but health and metrics needs.

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use nereid_core::restricted::Restriction;

use crate::error::ApiError;
use crate::AppState;

/// A group of the port's endpoints restricted together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiGroup {
    /// Completions, chat completions and embeddings.
    Inference,
    /// The model list, one model, load and unload.
    ModelRepository,
    /// `/metrics`.
    Metrics,
    /// `/health/ready`.
    Health,
}

impl ApiGroup {
    /// The groups in Triton's order, with their names on the command line.
    const ALL: [(&'static str, ApiGroup); 4] = [
        ("inference", ApiGroup::Inference),
        ("model-repository", ApiGroup::ModelRepository),
        ("metrics", ApiGroup::Metrics),
        ("health", ApiGroup::Health),
    ];

    /// The group of a request, by method and path prefix as Triton's middleware matches.
    fn of(method: &Method, path: &str) -> Option<Self> {
        let prefixed = |m: Method, prefix: &str| *method == m && path.starts_with(prefix);
        if prefixed(Method::POST, "/v1/chat/completions")
            || prefixed(Method::POST, "/v1/completions")
            || prefixed(Method::POST, "/v1/embeddings")
        {
            Some(Self::Inference)
        } else if prefixed(Method::GET, "/v1/models") || prefixed(Method::POST, "/v1/models/") {
            Some(Self::ModelRepository)
        } else if prefixed(Method::GET, "/metrics") {
            Some(Self::Metrics)
        } else if prefixed(Method::GET, "/health/ready") {
            Some(Self::Health)
        } else {
            None
        }
    }
}

/// The port's restricted groups; empty (everything open) by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restrictions {
    by_group: Vec<(ApiGroup, Restriction)>,
}

impl Restrictions {
    /// Parses the flag's occurrences, each `(apis, header, value)` with `apis` comma
    /// separated; Triton's messages for an unknown group and for a group named twice.
    pub fn parse(flags: &[(String, String, String)]) -> Result<Self, String> {
        let mut restrictions = Self::default();
        for (apis, header, value) in flags {
            for name in apis.split(',') {
                let Some(&(_, group)) = ApiGroup::ALL.iter().find(|(n, _)| *n == name) else {
                    let known: Vec<String> = ApiGroup::ALL
                        .iter()
                        .map(|(n, _)| format!("'{n}'"))
                        .collect();
                    return Err(format!(
                        "Unknown API '{name}'. Available APIs: [{}]",
                        known.join(", ")
                    ));
                };
                if restrictions.get(group).is_some() {
                    return Err(format!(
                        "restricted api '{name}' can not be specified in multiple config groups"
                    ));
                }
                restrictions.by_group.push((
                    group,
                    Restriction {
                        header: header.clone(),
                        value: value.clone(),
                    },
                ));
            }
        }
        Ok(restrictions)
    }

    /// The restriction on `group`, if any.
    fn get(&self, group: ApiGroup) -> Option<&Restriction> {
        self.by_group
            .iter()
            .find(|(g, _)| *g == group)
            .map(|(_, r)| r)
    }

    /// Whether no group is restricted.
    pub fn is_empty(&self) -> bool {
        self.by_group.is_empty()
    }
}

/// The middleware: a request of a restricted group without the header's value gets
/// Triton's 401.
pub(crate) async fn check(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let restrictions = &state.options.restricted_apis;
    let restriction = ApiGroup::of(request.method(), request.uri().path())
        .and_then(|group| restrictions.get(group));
    if let Some(restriction) = restriction {
        let presented = request
            .headers()
            .get(restriction.header.as_str())
            .map(|v| v.as_bytes());
        if !restriction.admits(presented) {
            return ApiError {
                status: StatusCode::UNAUTHORIZED,
                message: format!(
                    "This API is restricted, expecting header '{}' with valid value",
                    restriction.header
                ),
                kind: "authentication_error",
                param: None,
                code: Some("invalid_auth"),
                // Triton's middleware answers this one in OpenAI's shape alone.
                detail: false,
            }
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(apis: &str, header: &str, value: &str) -> (String, String, String) {
        (apis.into(), header.into(), value.into())
    }

    #[test]
    fn parses_groups_with_tritons_errors() {
        let r = Restrictions::parse(&[
            flag("inference,model-repository", "Admin-Key", "v"),
            flag("health", "h", "w"),
        ])
        .expect("valid");
        assert_eq!(
            r.get(ApiGroup::Inference).map(|r| r.header.as_str()),
            Some("Admin-Key")
        );
        assert!(r.get(ApiGroup::Metrics).is_none());
        let unknown = Restrictions::parse(&[flag("inference,unknown", "k", "v")]).unwrap_err();
        assert_eq!(
            unknown,
            "Unknown API 'unknown'. Available APIs: ['inference', 'model-repository', 'metrics', 'health']"
        );
        let twice =
            Restrictions::parse(&[flag("inference", "a", "1"), flag("inference", "b", "2")])
                .unwrap_err();
        assert_eq!(
            twice,
            "restricted api 'inference' can not be specified in multiple config groups"
        );
    }

    #[test]
    fn requests_map_to_tritons_groups() {
        assert_eq!(
            ApiGroup::of(&Method::POST, "/v1/completions"),
            Some(ApiGroup::Inference)
        );
        assert_eq!(
            ApiGroup::of(&Method::GET, "/v1/models/m"),
            Some(ApiGroup::ModelRepository)
        );
        assert_eq!(
            ApiGroup::of(&Method::POST, "/v1/models/m/load"),
            Some(ApiGroup::ModelRepository)
        );
        assert_eq!(ApiGroup::of(&Method::GET, "/v1/completions"), None);
        assert_eq!(
            ApiGroup::of(&Method::GET, "/health/ready"),
            Some(ApiGroup::Health)
        );
    }
}
