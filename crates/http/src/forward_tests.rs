//! `--http-header-forward-pattern` through the router: matching headers reach the model
//! as string parameters after the body's, only on the infer endpoint.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use nereid_core::header_forward::HeaderForward;
use nereid_core::request::{ParamValue, Parameters};
use nereid_core::testing::{self, TestBackend};
use tower::ServiceExt;

use crate::{router, HttpOptions};

const CONFIG: &str = r#"backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]"#;

const BODY: &str = r#"{"parameters": {"key1": "value1"},
  "inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1.0]}]}"#;

/// Posts [`BODY`] with `headers` to a router forwarding `pattern`; returns the status,
/// the body and the parameters the model saw (none when it did not run).
async fn infer(pattern: &str, headers: &[(&str, &str)]) -> (StatusCode, String, Parameters) {
    let repo = tempfile::tempdir().expect("temp dir");
    testing::write_model(repo.path(), "ident", CONFIG, &[1]);
    let backend = TestBackend::identity();
    let server = testing::server(repo.path(), &backend).await;
    let options = HttpOptions {
        max_input_size: crate::DEFAULT_MAX_INPUT_SIZE,
        limits: nereid_net::Limits::default(),
        restrictions: Default::default(),
        header_forward: Some(Arc::new(HeaderForward::new(pattern).expect("valid"))),
    };
    let mut request = Request::post("/v2/models/ident/infer");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Body::from(BODY)).expect("valid request");
    let response = router(server, options)
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let body = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a buffered body");
    let seen = backend
        .executions()
        .into_iter()
        .flat_map(|e| e.parameters)
        .next()
        .unwrap_or_default();
    (status, String::from_utf8_lossy(&body).into_owned(), seen)
}

fn string(name: &str, value: &str) -> (String, ParamValue) {
    (name.to_owned(), ParamValue::String(value.to_owned()))
}

#[tokio::test]
async fn matching_headers_reach_the_model_after_the_body_parameters() {
    let headers = [
        ("MY_HEADER_1", "my_value_1"),
        ("header_1", "value_1"),
        ("x-my_header_2", "say \"hi\"\\"),
    ];
    let (status, body, seen) = infer("MY_HEADER.*", &headers).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        seen,
        vec![
            string("key1", "value1"),
            string("my_header_1", "my_value_1"),
            string("x-my_header_2", "say \"hi\"\\"),
        ]
    );
}

#[tokio::test]
async fn case_sensitive_pattern_misses_lower_cased_names() {
    let (status, _, seen) = infer("(?-i)MY_HEADER.*", &[("MY_HEADER_1", "v")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seen, vec![string("key1", "value1")]);
}

#[tokio::test]
async fn reserved_header_fails_with_tritons_message() {
    let (status, body, seen) = infer(".*", &[("sequence_id", "1")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        r#"{"error":"Header 'sequence_id' is reserved for Triton usage and cannot be forwarded."}"#
    );
    assert!(seen.is_empty());
}
