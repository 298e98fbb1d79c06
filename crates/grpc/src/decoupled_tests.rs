//! Decoupled models over gRPC, against what Triton 2.51 answers for the same requests:
//! the stream writes each response as it comes with `triton_final_response`, an empty
//! final response only on request, errors in-stream; unary `ModelInfer` refuses them.

use std::collections::BTreeMap;
use std::time::Duration;

use nereid_core::testing::{self, Streaming, TestBackend};
use nereid_core::{ControlMode, Error};
use nereid_proto::inference::infer_parameter::ParameterChoice;
use nereid_proto::inference::model_infer_request::InferInputTensor;
use nereid_proto::inference::*;
use tokio_stream::StreamExt;
use tonic::Code;

use crate::tests::{start_traced, start_with, Harness, CONFIG};

const DECOUPLED: &str = r#"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
"#;

/// `dec` answers each request `responses` times, then the final flag alone, from
/// another thread after `late` (as a python model's response sender); `-1` fails.
pub(crate) async fn start(late: Duration) -> Harness {
    start_with(ControlMode::None, MODELS, &backend(late)).await
}

const MODELS: &[(&str, &str)] = &[("dec", DECOUPLED), ("ident", CONFIG)];

fn backend(late: Duration) -> TestBackend {
    TestBackend::identity()
        .failing_on(-1, Error::internal("boom"))
        .streaming(Streaming {
            responses: 1,
            final_alone: true,
            late: Some(late),
        })
}

fn int64(value: i64) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::Int64Param(value)),
    }
}

fn boolean(value: bool) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::BoolParam(value)),
    }
}

/// A request to `dec` sending `value` and asking for `responses` responses, and for
/// the empty final response when `empty_final`.
pub(crate) fn decoupled(
    id: &str,
    value: i32,
    responses: i64,
    empty_final: bool,
) -> ModelInferRequest {
    let mut parameters = std::collections::HashMap::new();
    parameters.insert("responses".to_string(), int64(responses));
    if empty_final {
        parameters.insert(
            "triton_enable_empty_final_response".to_string(),
            boolean(true),
        );
    }
    ModelInferRequest {
        model_name: "dec".into(),
        id: id.into(),
        parameters,
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "INT32".into(),
            shape: vec![1],
            ..Default::default()
        }],
        raw_input_contents: vec![testing::int32_bytes(&[value])],
        ..Default::default()
    }
}

pub(crate) fn plain(id: &str) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "ident".into(),
        id: id.into(),
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "FP32".into(),
            shape: vec![1, 1],
            ..Default::default()
        }],
        raw_input_contents: vec![testing::fp32_bytes(&[1.0])],
        ..Default::default()
    }
}

/// What a test compares of one stream message: the error, model name and version, the
/// `triton_final_response` parameter and how many outputs it carries.
#[derive(Debug, PartialEq)]
struct Seen {
    error: String,
    model: String,
    version: String,
    last: Option<bool>,
    outputs: usize,
}

fn seen(error: &str, model: &str, version: &str, last: Option<bool>, outputs: usize) -> Seen {
    Seen {
        error: error.into(),
        model: model.into(),
        version: version.into(),
        last,
        outputs,
    }
}

/// Sends `requests` on one stream, closes it, and returns the messages by request id
/// (each id's in arrival order) and the ids in arrival order.
async fn exchange(
    h: &mut Harness,
    requests: Vec<ModelInferRequest>,
) -> (BTreeMap<String, Vec<Seen>>, Vec<String>) {
    let mut inbound = h
        .client
        .model_stream_infer(tokio_stream::iter(requests))
        .await
        .expect("stream")
        .into_inner();
    let mut by_id: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
    let mut order = Vec::new();
    while let Some(message) = inbound.next().await {
        let message = message.expect("no transport error");
        let response = message.infer_response.expect("always set");
        let last = match response
            .parameters
            .get("triton_final_response")
            .and_then(|p| p.parameter_choice.as_ref())
        {
            Some(ParameterChoice::BoolParam(b)) => Some(*b),
            None => None,
            Some(other) => panic!("triton_final_response is {other:?}"),
        };
        order.push(response.id.clone());
        by_id.entry(response.id.clone()).or_default().push(Seen {
            error: message.error_message,
            model: response.model_name,
            version: response.model_version,
            last,
            outputs: response.outputs.len(),
        });
    }
    (by_id, order)
}

#[tokio::test]
async fn the_stream_writes_each_response_as_triton_does() {
    let mut h = start(Duration::ZERO).await;
    let mut wrong_type = decoupled("bad", 1, 1, false);
    wrong_type.inputs[0].datatype = "FP32".into();
    let mut unknown = plain("nope");
    unknown.model_name = "nope".into();
    let requests = vec![
        plain("plain"),
        decoupled("two", 1, 2, false),
        decoupled("none", 1, 0, false),
        decoupled("none+empty", 1, 0, true),
        decoupled("two+empty", 1, 2, true),
        decoupled("fails", -1, 2, false),
        wrong_type,
        unknown,
    ];
    let (by_id, _) = exchange(&mut h, requests).await;
    let response = |last| seen("", "dec", "1", Some(last), 1);
    let empty_final = seen("", "dec", "", Some(true), 0);
    let expected: BTreeMap<String, Vec<Seen>> = [
        ("plain", vec![seen("", "ident", "1", Some(true), 1)]),
        ("two", vec![response(false), response(false)]),
        ("none+empty", vec![empty_final]),
        (
            "two+empty",
            vec![
                response(false),
                response(false),
                seen("", "dec", "", Some(true), 0),
            ],
        ),
        ("fails", vec![seen("boom", "dec", "", Some(true), 0)]),
        (
            "bad",
            vec![seen(
                "[request id: bad] inference input 'INPUT0' data-type is 'FP32', but model 'dec' expects 'INT32'",
                "",
                "",
                None,
                0,
            )],
        ),
        (
            "nope",
            vec![seen(
                "Request for unknown model: 'nope' is not found",
                "",
                "",
                None,
                0,
            )],
        ),
    ]
    .into_iter()
    .map(|(id, messages)| (id.to_string(), messages))
    .collect();
    assert_eq!(by_id, expected);
}

#[tokio::test]
async fn a_later_request_is_not_held_behind_a_decoupled_one() {
    let mut h = start(Duration::from_millis(300)).await;
    let requests = vec![
        decoupled("slow", 1, 2, true),
        plain("first"),
        plain("second"),
    ];
    let (by_id, order) = exchange(&mut h, requests).await;
    assert_eq!(order, ["first", "second", "slow", "slow", "slow"]);
    assert_eq!(by_id["slow"].len(), 3);
}

#[tokio::test]
async fn unary_infer_refuses_a_decoupled_model_before_reading_its_inputs() {
    let mut h = start(Duration::ZERO).await;
    let mut wrong_type = decoupled("bad", 1, 1, false);
    wrong_type.inputs[0].datatype = "FP32".into();
    for request in [decoupled("one", 1, 1, false), wrong_type] {
        let status = h.client.model_infer(request).await.expect_err("refused");
        assert_eq!(status.code(), Code::Unimplemented);
        assert_eq!(
            status.message(),
            "ModelInfer RPC doesn't support models with decoupled transaction policy"
        );
    }
}

/// The activity names of each of the `count` traces written to `<file>.<n>`, by request
/// id, in file order (waiting for them to be written).
async fn traced_names(file: &std::path::Path, count: usize) -> BTreeMap<String, Vec<String>> {
    let path = |i: usize| std::path::PathBuf::from(format!("{}.{i}", file.display()));
    for _ in 0..200 {
        if (0..count).all(|i| path(i).exists()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut names_of = BTreeMap::new();
    let mut by_request = BTreeMap::new();
    for i in 0..count {
        let text = std::fs::read_to_string(path(i)).expect("trace written");
        let records: Vec<serde_json::Value> = serde_json::from_str(&text).expect("JSON");
        for record in records {
            let id = record["id"].as_u64().expect("an id");
            if let Some(request) = record["request_id"].as_str() {
                by_request.insert(request.to_string(), id);
            }
            if let Some(name) = record["timestamps"][0]["name"].as_str() {
                names_of
                    .entry(id)
                    .or_insert_with(Vec::new)
                    .push(name.to_string());
            }
        }
    }
    by_request
        .into_iter()
        .map(|(request, id)| (request, names_of.remove(&id).unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn stream_requests_are_traced_until_their_last_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("trace.json");
    // Answers sent from another thread after the execution returned: the request ends
    // (REQUEST_END) before its responses, and its trace still waits for them.
    let late = backend(Duration::from_millis(100));
    let mut h = start_traced(
        ControlMode::None,
        MODELS,
        &late,
        nereid_core::testing::trace_every_request(&file, false),
    )
    .await;
    let requests = vec![decoupled("late", 1, 2, true), plain("plain")];
    let (by_id, _) = exchange(&mut h, requests).await;
    assert_eq!(by_id["late"].len(), 3);
    let names = traced_names(&file, 2).await;
    let core = [
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
    ];
    let send = ["GRPC_SEND_START", "GRPC_SEND_END"];
    let mut plain = vec!["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"];
    plain.extend(core);
    plain.push("INFER_RESPONSE_COMPLETE");
    plain.extend(send);
    assert_eq!(names["plain"], plain);
    // Two responses and the empty final one asked for: three messages written, the
    // response completed once, at the first.
    let mut late = vec!["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"];
    late.extend(core);
    late.push("INFER_RESPONSE_COMPLETE");
    late.extend(send.repeat(3));
    assert_eq!(names["late"], late);
}
