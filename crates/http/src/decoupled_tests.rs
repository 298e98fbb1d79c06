//! Decoupled models over HTTP, against what Triton 2.51 answers for the same requests:
//! `infer` refuses them before reading the body; `generate_stream` writes an event per
//! response; `generate` needs exactly one response and takes the status of the first.

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use nereid_core::testing::{self, Streaming, TestBackend};
use nereid_core::Error;
use tower::ServiceExt;

use crate::{router, HttpOptions};

const DECOUPLED: &str = r#"backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }"#;

/// Posts `body` to `path` on a router serving the decoupled model `dec`, which answers
/// each request as many times as its `responses` parameter says (then the final flag
/// alone) and fails a request sending -1; returns the status, content type and body.
async fn post(path: &str, body: &str) -> (StatusCode, String, String) {
    let repo = tempfile::tempdir().expect("temp dir");
    testing::write_model(repo.path(), "dec", DECOUPLED, &[1]);
    let backend = TestBackend::identity()
        .failing_on(-1, Error::invalid_arg("boom"))
        .streaming(Streaming {
            final_alone: true,
            ..Streaming::default()
        });
    let server = testing::server(repo.path(), &backend).await;
    let options = HttpOptions {
        max_input_size: crate::DEFAULT_MAX_INPUT_SIZE,
        limits: nereid_net::Limits::default(),
        restrictions: Default::default(),
        header_forward: None,
    };
    let request = Request::post(path)
        .body(Body::from(body.to_string()))
        .expect("valid request");
    let response = router(server, options)
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a buffered body");
    (
        status,
        content_type,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// A generate body sending `value` and asking for `responses` responses.
fn generate_body(value: i32, responses: i64) -> String {
    format!(r#"{{"INPUT0": [{value}], "parameters": {{"responses": {responses}}}}}"#)
}

const EXACTLY_ONE: &str = r#"{"error":"generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses"}"#;

#[tokio::test]
async fn infer_refuses_a_decoupled_model_before_reading_the_body() {
    let refused =
        r#"{"error":"HTTP end point doesn't support models with decoupled transaction policy"}"#;
    for body in [
        r#"{"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "INT32", "data": [1]}]}"#,
        "garbage",
    ] {
        let (status, _, answer) = post("/v2/models/dec/infer", body).await;
        assert_eq!(
            (status, answer.as_str()),
            (StatusCode::NOT_IMPLEMENTED, refused)
        );
    }
}

#[tokio::test]
async fn generate_answers_only_one_response_under_the_first_ones_status() {
    let (status, content_type, body) = post("/v2/models/dec/generate", &generate_body(7, 1)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "application/json");
    assert_eq!(
        body,
        r#"{"OUTPUT0":7,"model_name":"dec","model_version":"1"}"#
    );
    // None or several: Triton's error, under the status the reply started with.
    for responses in [0, 2] {
        let (status, _, body) = post("/v2/models/dec/generate", &generate_body(7, responses)).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, EXACTLY_ONE));
    }
    // A failed request's error is its one response.
    let (status, _, body) = post("/v2/models/dec/generate", &generate_body(-1, 1)).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::BAD_REQUEST, r#"{"error":"boom"}"#)
    );
}

#[tokio::test]
async fn generate_stream_sends_an_event_per_response() {
    let path = "/v2/models/dec/generate_stream";
    let (status, content_type, body) = post(path, &generate_body(3, 2)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "text/event-stream; charset=utf-8");
    let event = r#"data: {"OUTPUT0":3,"model_name":"dec","model_version":"1"}"#;
    assert_eq!(body, format!("{event}\n\n{event}\n\n"));
    let (status, _, body) = post(path, &generate_body(3, 0)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
    let (status, _, body) = post(path, &generate_body(-1, 1)).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::BAD_REQUEST, "data: {\"error\":\"boom\"}\n\n")
    );
}
