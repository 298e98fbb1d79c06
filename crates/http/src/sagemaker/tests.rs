//! The SageMaker endpoint through its router, with the answers Triton 2.51 gave to the
//! same requests: ping, invocations in JSON and binary framing, the paths and methods it
//! refuses, and the multi-model load / list / invoke / unload cycle.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::Router;
use nereid_core::testing::{self, TestBackend};
use nereid_core::{ControlMode, ModelRepository, Server};
use serde_json::{json, Value};

use super::*;
use crate::endpoint::testing::{binary_request, send, CONFIG, JSON};

/// A SageMaker router over a repository holding `ident`.
async fn single(options: SagemakerOptions) -> (tempfile::TempDir, Router) {
    let repo = tempfile::tempdir().expect("temp dir");
    testing::write_model(repo.path(), "ident", CONFIG, &[1]);
    let server = testing::server(repo.path(), &TestBackend::identity()).await;
    let router = router(server, options).await.expect("starts");
    (repo, router)
}

/// A SageMaker router over an empty repository in `control_mode`, and a model archive
/// holding `add_sub`: (the repository, the archive, the router).
async fn multi_model(control_mode: ControlMode) -> (tempfile::TempDir, tempfile::TempDir, Router) {
    let root = tempfile::tempdir().expect("temp dir");
    let options = testing::repository_options(root.path(), control_mode, &[]);
    let repository = Arc::new(ModelRepository::new(
        options,
        TestBackend::identity().registry(),
    ));
    repository.load_startup_models().await.expect("empty");
    let identity = nereid_core::server::ServerIdentity {
        name: "nereid".into(),
        version: "0.0.0".into(),
    };
    let server = Arc::new(Server::new(identity, repository, true));
    let router = router(server, SagemakerOptions::default())
        .await
        .expect("starts");
    let archive = tempfile::tempdir().expect("temp dir");
    testing::write_model(archive.path(), "add_sub", CONFIG, &[1]);
    (root, archive, router)
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("a JSON body")
}

/// The status and error message of a failed load of `body`.
async fn load_error(router: &Router, body: impl Into<axum::body::Body>) -> (StatusCode, String) {
    let (status, _, answer) = send(router, "POST", "/models", &[], body).await;
    let message = json_of(&answer)["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (status, message)
}

#[tokio::test]
async fn ping_answers_readiness_or_liveness() {
    let (_repo, router) = single(SagemakerOptions::default()).await;
    let (status, _, body) = send(&router, "GET", "/ping", &[], "").await;
    assert_eq!((status, body.is_empty()), (StatusCode::OK, true));
    let (status, _, body) = send(&router, "POST", "/ping", &[], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(json_of(&body), json!({"error": "Method Not Allowed"}));
    let live = SagemakerOptions {
        ping: Health::Live,
        ..SagemakerOptions::default()
    };
    let (_repo, router) = single(live).await;
    assert_eq!(
        send(&router, "GET", "/ping?x=1", &[], "").await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn invocations_run_the_only_model_in_json_and_binary() {
    let (_repo, router) = single(SagemakerOptions::default()).await;
    let (status, headers, body) = send(&router, "POST", "/invocations", &[], JSON).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(headers["content-type"], "application/json");
    let answer = json_of(&body);
    assert_eq!(answer["model_name"], "ident");
    assert_eq!(answer["outputs"][0]["data"], json!([1.5, 2.5]));

    let (request, json_length) = binary_request();
    let content_type = format!("{BINARY_CONTENT_TYPE}{json_length}");
    let headers = [("content-type", content_type.as_str())];
    let (status, headers, body) = send(&router, "POST", "/invocations", &headers, request).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert!(headers.get(HEADER_LENGTH).is_none());
    let announced = headers["content-type"].to_str().expect("ASCII");
    let length: usize = announced
        .strip_prefix(BINARY_CONTENT_TYPE)
        .and_then(|n| n.parse().ok())
        .expect("the JSON length in the content type");
    assert_eq!(
        json_of(&body[..length])["outputs"][0]["parameters"]["binary_data_size"],
        8
    );
    assert_eq!(
        &body[length..],
        [1.5f32.to_le_bytes(), 2.5f32.to_le_bytes()].concat()
    );
}

#[tokio::test]
async fn invocations_fail_with_tritons_statuses_and_messages() {
    let (_repo, router) = single(SagemakerOptions::default()).await;
    let (status, _, body) = send(&router, "GET", "/invocations", &[], "").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(json_of(&body), json!({"error": "Method Not Allowed"}));
    let too_long = format!("{BINARY_CONTENT_TYPE}99999");
    let (status, _, body) = send(
        &router,
        "POST",
        "/invocations",
        &[("content-type", too_long.as_str())],
        JSON,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        json_of(&body)["error"],
        format!(
            "inference header size should be in range (0, {}), got: 99999",
            JSON.len()
        )
    );
    let (status, _, body) = send(&router, "POST", "/invocations", &[], "{bad").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body:?}");

    let named = SagemakerOptions {
        default_model: Some("nosuch".into()),
        ..SagemakerOptions::default()
    };
    let (_repo, router) = single(named).await;
    let (status, _, body) = send(&router, "POST", "/invocations", &[], JSON).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        json_of(&body)["error"],
        "Request for unknown model: 'nosuch' is not found"
    );
}

#[tokio::test]
async fn without_a_single_model_invocations_name_tritons_placeholder() {
    let repo = tempfile::tempdir().expect("temp dir");
    for name in ["a", "b"] {
        testing::write_model(repo.path(), name, CONFIG, &[1]);
    }
    let server = testing::server(repo.path(), &TestBackend::identity()).await;
    let router = router(server, SagemakerOptions::default())
        .await
        .expect("starts");
    let (status, _, body) = send(&router, "POST", "/invocations", &[], JSON).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        json_of(&body)["error"],
        format!("Request for unknown model: '{UNSPECIFIED_MODEL}' is not found")
    );
}

#[tokio::test]
async fn other_paths_and_methods_are_bare_errors() {
    let (_repo, router) = single(SagemakerOptions::default()).await;
    for (method, path, expected) in [
        ("GET", "/nothing", StatusCode::BAD_REQUEST),
        ("GET", "/v2/health/ready", StatusCode::BAD_REQUEST),
        ("PUT", "/models/x", StatusCode::BAD_REQUEST),
        ("GET", "/models/x", StatusCode::NOT_FOUND),
        ("GET", "/modelsx", StatusCode::NOT_FOUND),
        ("POST", "/models/x/invoke", StatusCode::NOT_FOUND),
        ("DELETE", "/models/x", StatusCode::NOT_FOUND),
    ] {
        let (status, _, body) = send(&router, method, path, &[], "").await;
        assert_eq!(
            (status, body.is_empty()),
            (expected, true),
            "{method} {path}"
        );
    }
    let (status, _, body) = send(&router, "GET", "/models/", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json_of(&body), json!({"models": []}));
}

#[tokio::test]
async fn the_multi_model_endpoint_loads_lists_invokes_and_unloads() {
    let (_root, archive, router) = multi_model(ControlMode::Explicit).await;
    let url = archive.path().display().to_string();
    let load = json!({"model_name": "h1", "url": url}).to_string();

    let (status, _, body) = send(&router, "POST", "/models", &[], load.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let listed = json!({"models": [{"modelName": "h1", "modelUrl": url}]});
    assert_eq!(
        json_of(&send(&router, "GET", "/models", &[], "").await.2),
        listed
    );
    let (status, _, body) = send(&router, "GET", "/models/h1", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json_of(&body), json!({"modelName": "h1", "modelUrl": url}));

    let (status, _, body) = send(&router, "POST", "/models/h1/invoke", &[], JSON).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(json_of(&body)["model_name"], "h1");
    // Errors of an invocation are 400 whatever their kind.
    let target = [("X-Amzn-SageMaker-Target-Model", "nosuch")];
    let (status, _, body) = send(&router, "POST", "/models/h1/invoke", &target, JSON).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        json_of(&body)["error"],
        "Request for unknown model: 'nosuch' is not found"
    );

    assert_eq!(
        load_error(&router, load.clone()).await,
        (
            StatusCode::CONFLICT,
            format!("model repository '{url}' has already been registered")
        )
    );
    let missing = json!({"model_name": "h2", "url": "/nonexistent"}).to_string();
    assert_eq!(
        load_error(&router, missing).await,
        (
            StatusCode::BAD_REQUEST,
            "failed to register '/nonexistent', repository not found".to_string()
        )
    );

    let (status, _, body) = send(&router, "DELETE", "/models/h1", &[], "").await;
    assert_eq!((status, body.is_empty()), (StatusCode::OK, true));
    assert_eq!(
        json_of(&send(&router, "GET", "/models", &[], "").await.2),
        json!({"models": []})
    );
    assert_eq!(
        send(&router, "POST", "/models/h1/invoke", &[], JSON)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        send(&router, "DELETE", "/models/h1", &[], "").await.0,
        StatusCode::NOT_FOUND
    );
    // Unregistered, the archive loads again.
    assert_eq!(
        send(&router, "POST", "/models", &[], load).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_target_model_header_names_the_model_and_the_list_shows_it_empty() {
    let (_root, archive, router) = multi_model(ControlMode::Explicit).await;
    let load = json!({"model_name": "y", "url": archive.path()}).to_string();
    let target = [("X-Amzn-SageMaker-Target-Model", "tgt")];
    assert_eq!(
        send(&router, "POST", "/models", &target, load).await.0,
        StatusCode::OK
    );
    // Triton looks the listed name up, which is not the model's: an empty entry.
    assert_eq!(
        json_of(&send(&router, "GET", "/models", &[], "").await.2),
        json!({"models": [{}]})
    );
    let (status, _, body) = send(&router, "POST", "/models/y/invoke", &target, JSON).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(json_of(&body)["model_name"], "tgt");
    assert_eq!(
        send(&router, "DELETE", "/models/y", &target, "").await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn loads_need_explicit_model_control_and_a_model_name() {
    let (_root, archive, router) = multi_model(ControlMode::None).await;
    let load = json!({"model_name": "h", "url": archive.path()}).to_string();
    assert_eq!(
        load_error(&router, load).await,
        (
            StatusCode::BAD_REQUEST,
            "repository registration is not allowed if model control mode is not EXPLICIT"
                .to_string()
        )
    );
    let (status, message) = load_error(&router, "{}").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        message.starts_with("the request names no model"),
        "{message}"
    );
}

#[tokio::test]
async fn invocations_run_the_generate_extension_when_told_to() {
    let generate = |inference_type| SagemakerOptions {
        default_model: Some("ident".into()),
        inference_type,
        ..SagemakerOptions::default()
    };
    let body = r#"{"INPUT0": [1.5, 2.5]}"#;
    let (_repo, router) = single(generate(InferenceType::Generate)).await;
    let (status, _, answer) = send(&router, "POST", "/invocations", &[], body).await;
    assert_eq!(status, StatusCode::OK, "{answer:?}");
    assert_eq!(
        json_of(&answer),
        json!({"OUTPUT0": [1.5, 2.5], "model_name": "ident", "model_version": "1"})
    );
    let (_repo, router) = single(generate(InferenceType::GenerateStream)).await;
    let (status, _, answer) = send(&router, "POST", "/invocations", &[], body).await;
    assert_eq!(status, StatusCode::OK);
    let event = String::from_utf8(answer.to_vec()).expect("text");
    assert!(
        event.starts_with("data: {") && event.ends_with("}\n\n"),
        "{event}"
    );
}

#[test]
fn the_inference_type_is_one_of_tritons_three() {
    assert_eq!(InferenceType::from_env(None), Ok(InferenceType::Infer));
    assert_eq!(
        InferenceType::from_env(Some("generate_stream")),
        Ok(InferenceType::GenerateStream)
    );
    assert_eq!(
        InferenceType::from_env(Some("incorrect_inference_type")),
        Err("Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'incorrect_inference_type': must be one of: infer, generate, generate_stream".to_string())
    );
}
