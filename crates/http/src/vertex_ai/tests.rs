//! The Vertex AI endpoint through its router, with the answers Triton 2.51 gave to the
//! same requests: start-up refusals, the health and predict routes as patterns, and the
//! redirect header's routes.

use std::sync::Arc;

use axum::http::StatusCode;
use nereid_core::testing::{self, TestBackend};
use nereid_core::Server;
use serde_json::{json, Value};

use super::*;
use crate::endpoint::testing::{binary_request, send, CONFIG, JSON};
use crate::infer::HEADER_LENGTH;

const REDIRECT: &str = "X-Vertex-Ai-Triton-Redirect";

/// Options with Vertex AI's routes as the tests' environment sets them.
fn routes() -> VertexAiOptions {
    VertexAiOptions {
        predict_route: Some("/v1/endpoints/[0-9]+/deployedModels/[0-9]+:predict".into()),
        health_route: Some("/health".into()),
        ..VertexAiOptions::default()
    }
}

/// A server over a repository holding `models`.
async fn server(models: &[&str]) -> (tempfile::TempDir, Arc<Server>) {
    let repo = tempfile::tempdir().expect("temp dir");
    for name in models {
        testing::write_model(repo.path(), name, CONFIG, &[1]);
    }
    let server = testing::server(repo.path(), &TestBackend::identity()).await;
    (repo, server)
}

async fn start_error(models: &[&str], options: VertexAiOptions) -> String {
    let (_repo, server) = server(models).await;
    match router(server, options).await {
        Ok(_) => panic!("started"),
        Err(e) => e.message().to_string(),
    }
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("a JSON body")
}

const PREDICT: &str = "/v1/endpoints/12/deployedModels/34:predict";

#[tokio::test]
async fn start_up_needs_both_routes_and_one_default_model() {
    let no_predict = VertexAiOptions {
        predict_route: None,
        ..routes()
    };
    assert_eq!(
        start_error(&["a"], no_predict).await,
        "API_PREDICT_ROUTE is not defined for Vertex AI endpoint"
    );
    let no_health = VertexAiOptions {
        health_route: Some(String::new()),
        ..routes()
    };
    assert_eq!(
        start_error(&["a"], no_health).await,
        "AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint"
    );
    assert_eq!(
        start_error(&["a", "b"], routes()).await,
        "Expect the model repository contains only a single model if default model is not specified"
    );
    let named = VertexAiOptions {
        default_model: Some("nosuch".into()),
        ..routes()
    };
    assert_eq!(
        start_error(&["a", "b"], named).await,
        "Expect the default model 'nosuch' is loaded"
    );
    let invalid = VertexAiOptions {
        health_route: Some("/(".into()),
        ..routes()
    };
    assert!(start_error(&["a"], invalid)
        .await
        .starts_with("AIP_HEALTH_ROUTE '/(' is not a valid regular expression"));
}

#[tokio::test]
async fn the_health_and_predict_routes_are_whole_path_patterns() {
    let (_repo, server) = server(&["a", "b"]).await;
    let options = VertexAiOptions {
        default_model: Some("b".into()),
        ..routes()
    };
    let router = router(server, options).await.expect("starts");
    assert_eq!(
        send(&router, "GET", "/health", &[], "").await.0,
        StatusCode::OK
    );
    let (status, _, body) = send(&router, "POST", "/health", &[], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(json_of(&body), json!({"error": "Method Not Allowed"}));
    for path in [
        "/healthz",
        "/v2/health/ready",
        "/v1/endpoints/x/deployedModels/1:predict",
    ] {
        let (status, _, body) = send(&router, "GET", path, &[], "").await;
        assert_eq!(
            (status, body.is_empty()),
            (StatusCode::BAD_REQUEST, true),
            "{path}"
        );
    }
    let (status, _, body) = send(&router, "POST", PREDICT, &[], JSON).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(json_of(&body)["model_name"], "b");
    let (status, _, body) = send(&router, "GET", PREDICT, &[], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(json_of(&body), json!({"error": "Method Not Allowed"}));
}

#[tokio::test]
async fn predict_reads_binary_framing_from_the_content_type() {
    let (_repo, server) = server(&["a"]).await;
    let router = router(server, routes()).await.expect("starts");
    let (request, json_length) = binary_request();
    let content_type = format!("{BINARY_CONTENT_TYPE}{json_length}");
    let headers = [("content-type", content_type.as_str())];
    let (status, headers, body) = send(&router, "POST", PREDICT, &headers, request).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(headers["content-type"], "application/octet-stream");
    let length: usize = headers[HEADER_LENGTH]
        .to_str()
        .ok()
        .and_then(|n| n.parse().ok())
        .expect("KServe's header on the answer");
    assert_eq!(json_of(&body[..length])["model_name"], "a");
    assert_eq!(body.len(), length + 8);
    // KServe's request header is not read: the binary data is taken for JSON.
    let (request, json_length) = binary_request();
    let kserve = json_length.to_string();
    let headers = [("inference-header-content-length", kserve.as_str())];
    assert_eq!(
        send(&router, "POST", PREDICT, &headers, request).await.0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn the_redirect_header_reaches_tritons_kserve_routes() {
    let (_repo, server) = server(&["a"]).await;
    let router = router(server, routes()).await.expect("starts");
    let redirect = |to: &'static str| [(REDIRECT, to)];
    let infer = redirect("v2/models/a/versions/1/infer");
    let (status, _, body) = send(&router, "POST", PREDICT, &infer, JSON).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(json_of(&body)["model_name"], "a");
    let (status, _, body) =
        send(&router, "POST", PREDICT, &redirect("v2/models/a/ready"), "").await;
    assert_eq!((status, body.is_empty()), (StatusCode::OK, true));
    // (redirect, status, a JSON pointer into the answer, the value there)
    let answers = [
        (
            "v2/models/nosuch/ready",
            400,
            "/error",
            json!("Model version not ready"),
        ),
        ("v2/models/a", 200, "/name", json!("a")),
        ("v2/models/a/config", 200, "/name", json!("a")),
        (
            "v2/models/stats",
            200,
            "/model_stats/0/inference_count",
            json!(1),
        ),
        ("v2", 200, "/name", json!("nereid")),
        (
            "v2/repository/index",
            200,
            "",
            json!([{"name": "a", "version": "1", "state": "READY"}]),
        ),
        ("v2/systemsharedmemory/status", 200, "", json!([])),
        (
            "v2/repository/r/models/a/load",
            501,
            "/error",
            json!("'repository_name' specification is not supported"),
        ),
    ];
    for (to, status, pointer, value) in answers {
        let (got, _, body) = send(&router, "POST", PREDICT, &redirect(to), "").await;
        assert_eq!(got.as_u16(), status, "{to}: {body:?}");
        assert_eq!(json_of(&body).pointer(pointer), Some(&value), "{to}");
    }
    let (status, _, body) = send(&router, "POST", PREDICT, &redirect("metrics"), "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("nv_inference_request_success{model=\"a\""));
    for not_redirected in ["v2/models/a/generate", "v2/trace/setting", "nothing", ""] {
        let (status, _, body) = send(&router, "POST", PREDICT, &redirect(not_redirected), "").await;
        assert_eq!(
            (status, body.is_empty()),
            (StatusCode::BAD_REQUEST, true),
            "{not_redirected}"
        );
    }
    let (status, _, body) = send(&router, "GET", PREDICT, &redirect("v2"), "").await;
    assert_eq!(
        (status, body.is_empty()),
        (StatusCode::METHOD_NOT_ALLOWED, true)
    );
}
