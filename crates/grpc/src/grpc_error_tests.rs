//! The `triton_grpc_error: true` stream header, against Triton 2.51's
//! `ModelStreamInferHandler`: the first request that fails after it was issued ends the
//! stream with its gRPC status; refusals before issue are still answered in-stream.

use std::time::Duration;

use nereid_proto::inference::{ModelInferRequest, ModelStreamInferResponse};
use tokio_stream::StreamExt;
use tonic::{Code, Status};

use crate::decoupled_tests::{decoupled, plain, start};
use crate::tests::Harness;

/// Sends `requests` on one stream opened with `triton_grpc_error: true` and returns what
/// came back: each message's request id and error, then the status the stream ended
/// with, if any.
async fn exchange(
    h: &mut Harness,
    requests: Vec<ModelInferRequest>,
) -> (Vec<(String, String)>, Option<Status>) {
    let mut call = tonic::Request::new(tokio_stream::iter(requests));
    call.metadata_mut()
        .insert("triton_grpc_error", "true".parse().expect("ascii"));
    let mut inbound = h
        .client
        .model_stream_infer(call)
        .await
        .expect("stream")
        .into_inner();
    let mut messages = Vec::new();
    while let Some(message) = inbound.next().await {
        match message {
            Ok(ModelStreamInferResponse {
                error_message,
                infer_response,
            }) => {
                let id = infer_response.expect("always set").id;
                messages.push((id, error_message));
            }
            Err(status) => {
                assert!(inbound.next().await.is_none(), "nothing after the status");
                return (messages, Some(status));
            }
        }
    }
    (messages, None)
}

/// A request to the identity model `ident` that its backend fails (its first input's
/// bytes are the backend's failure marker, -1).
fn failing_plain(id: &str) -> ModelInferRequest {
    let mut request = plain(id);
    request.raw_input_contents = vec![(-1i32).to_le_bytes().to_vec().into()];
    request
}

#[tokio::test]
async fn a_request_failing_in_its_model_ends_the_stream_with_its_status() {
    let mut h = start(Duration::ZERO).await;
    let mut wrong_type = plain("wrong type");
    wrong_type.inputs[0].datatype = "INT32".into();
    let mut unknown = plain("unknown");
    unknown.model_name = "nope".into();
    let requests = vec![
        plain("first"),
        wrong_type,
        unknown,
        failing_plain("fails"),
        plain("never"),
    ];
    let (messages, status) = exchange(&mut h, requests).await;
    let ids: Vec<&str> = messages.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        ["first", "wrong type", "unknown"],
        "{messages:?} {status:?}"
    );
    assert!(messages[0].1.is_empty());
    assert!(
        messages[1].1.contains("data-type is 'INT32'"),
        "{messages:?}"
    );
    assert!(messages[2].1.contains("unknown model"), "{messages:?}");
    let status = status.expect("the stream ended with a status");
    assert_eq!(status.code(), Code::Internal);
    assert_eq!(status.message(), "boom");
}

#[tokio::test]
async fn a_decoupled_answer_that_fails_ends_the_stream_with_its_status() {
    let mut h = start(Duration::ZERO).await;
    let mut wrong_type = decoupled("wrong type", 1, 1, false);
    wrong_type.inputs[0].datatype = "FP32".into();
    let requests = vec![
        wrong_type,
        decoupled("two", 1, 2, false),
        decoupled("fails", -1, 2, false),
    ];
    let (messages, status) = exchange(&mut h, requests).await;
    let status = status.expect("the stream ended with a status");
    assert_eq!((status.code(), status.message()), (Code::Internal, "boom"));
    assert!(
        messages
            .iter()
            .any(|(id, error)| id == "wrong type" && error.contains("data-type is 'FP32'")),
        "{messages:?}"
    );
    assert!(messages.iter().all(|(id, _)| id != "fails"), "{messages:?}");
}

#[tokio::test]
async fn a_stream_without_failures_ends_as_usual() {
    let mut h = start(Duration::from_millis(50)).await;
    let requests = vec![decoupled("two", 1, 2, true), plain("plain")];
    let (messages, status) = exchange(&mut h, requests).await;
    assert!(status.is_none(), "{status:?}");
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert!(messages.iter().all(|(_, error)| error.is_empty()));
}
