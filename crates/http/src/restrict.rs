//! `--http-restricted-api`: routes of a restricted API group answer 403 with Triton's
//! message unless the request carries the group's header with its value. The check runs
//! before the route's method check and before the body is read, as in Triton's handlers
//! (`RETURN_AND_RESPOND_IF_RESTRICTED` comes first in each): a restricted route gets its
//! 405 answer inside the check, since the route table's own 405 fallback would replace a
//! guarded one.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{from_fn_with_state, Next};
use axum::response::Response;
use axum::routing::MethodRouter;
use axum::Router;
use nereid_core::restricted::{ApiGroup, Restriction, Restrictions};

use crate::error::{error_body, method_not_allowed};

/// `route`, answering only requests `restrictions` admits for `group`; unchanged (no
/// per-request cost) when the group is open.
pub(crate) fn route<S>(
    restrictions: &Restrictions,
    group: ApiGroup,
    route: MethodRouter<S>,
) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    match restrictions.get(group) {
        Some(restriction) => route
            .fallback(method_not_allowed)
            .layer(from_fn_with_state(Arc::new(restriction.clone()), check)),
        None => route,
    }
}

/// [`route`] for every route of `router` (a group's routes built together).
pub(crate) fn router<S>(
    restrictions: &Restrictions,
    group: ApiGroup,
    router: Router<S>,
) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    match restrictions.get(group) {
        Some(restriction) => router
            .method_not_allowed_fallback(method_not_allowed)
            .layer(from_fn_with_state(Arc::new(restriction.clone()), check)),
        None => router,
    }
}

/// Passes an admitted request on; answers any other with Triton's 403.
async fn check(
    State(restriction): State<Arc<Restriction>>,
    request: Request,
    next: Next,
) -> Response {
    let value = request.headers().get(restriction.header.as_str());
    if restriction.admits(value.map(|v| v.as_bytes())) {
        return next.run(request).await;
    }
    error_body(
        StatusCode::FORBIDDEN,
        &format!(
            "This API is restricted, expecting header '{}'",
            restriction.header
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{to_bytes, Body};
    use axum::routing::get;
    use tower::ServiceExt;

    fn app() -> Router {
        let flags = ["health,shared-memory:k=v".to_string()];
        let restrictions =
            Restrictions::parse(&flags, "http-restricted-api", "", "api").expect("valid");
        let ok = || async { "ok" };
        let shm = Router::new().route("/shm", get(ok));
        Router::new()
            .route("/live", route(&restrictions, ApiGroup::Health, get(ok)))
            .route("/meta", route(&restrictions, ApiGroup::Metadata, get(ok)))
            .merge(router(&restrictions, ApiGroup::SharedMemory, shm))
            .method_not_allowed_fallback(method_not_allowed)
    }

    async fn call(method: &str, path: &str, value: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(value) = value {
            request = request.header("k", value);
        }
        let response = app()
            .oneshot(request.body(Body::empty()).expect("request"))
            .await
            .expect("infallible");
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 16).await.expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn restricted_routes_answer_403_before_their_method_check() {
        let refused = (
            StatusCode::FORBIDDEN,
            r#"{"error":"This API is restricted, expecting header 'k'"}"#.to_string(),
        );
        for (method, path) in [
            ("GET", "/live"),
            ("POST", "/live"),
            ("GET", "/shm"),
            ("PUT", "/shm"),
        ] {
            assert_eq!(call(method, path, None).await, refused, "{method} {path}");
            assert_eq!(
                call(method, path, Some("w")).await,
                refused,
                "{method} {path}"
            );
        }
        assert_eq!(call("GET", "/live", Some("v")).await.0, StatusCode::OK);
        assert_eq!(call("GET", "/shm", Some("v")).await.0, StatusCode::OK);
        assert_eq!(
            call("POST", "/live", Some("v")).await,
            (
                StatusCode::METHOD_NOT_ALLOWED,
                r#"{"error":"Method Not Allowed"}"#.to_string()
            )
        );
        assert_eq!(call("GET", "/meta", None).await.0, StatusCode::OK);
        assert_eq!(
            call("POST", "/meta", None).await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
