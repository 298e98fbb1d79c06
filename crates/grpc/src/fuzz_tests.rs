//! Fuzzing of `ModelInfer`: `ModelInferRequest` → core request conversion (raw and typed
//! contents, parameters, shared-memory keys, requested outputs), the core's validation
//! and the response encoding, called on the service itself against the echo models of
//! [`fuzz::echo_server`]. Requests are built at random, valid ones mutated field by field
//! (hostile shapes, lying raw entries, wrong parameter types, unknown datatypes) or as
//! encoded bytes mutated and decoded again with prost.
//!
//! A valid request must come back with its tensors echoed byte for byte; anything else
//! must be answered with a client `Status` (never `INTERNAL` or `UNKNOWN`, the codes a
//! bug produces), and a success must be well-formed. `NEREID_FUZZ_ITERATIONS` sets the
//! iteration count (see docs/src/development.md, "Fuzzing").

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use nereid_core::request::join_bytes_elements;
use nereid_core::testing::fuzz::{self, Rng, TrackingAllocator};
use nereid_core::Server;
use nereid_proto::inference::grpc_inference_service_server::GrpcInferenceService;
use nereid_proto::inference::infer_parameter::ParameterChoice;
use nereid_proto::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use nereid_proto::inference::{InferParameter, InferTensorContents, ModelInferRequest};
use prost::Message;
use tonic::{Code, Request};

use crate::InferenceService;

#[global_allocator]
static ALLOCATOR: TrackingAllocator = TrackingAllocator;

/// Iterations in the test command (a few seconds in release mode).
const SHORT_RUN: u64 = 20_000;

/// The service over [`fuzz::echo_server`], with the runtime that serves it.
struct Harness {
    runtime: tokio::runtime::Runtime,
    service: InferenceService,
    _repo: tempfile::TempDir,
}

impl Harness {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let repo = tempfile::tempdir().expect("temp dir");
        let server: Arc<Server> = runtime.block_on(fuzz::echo_server(repo.path()));
        Self {
            runtime,
            service: InferenceService {
                server,
                header_forward: None,
                infer_delays: Default::default(),
                response_pool_size: nereid_core::response_stream::RESPONSES_BUFFERED,
            },
            _repo: repo,
        }
    }
}

/// One generated request and, for an unmutated one, the raw bytes each output must echo.
#[derive(Debug)]
struct Case {
    request: ModelInferRequest,
    expected: Option<Vec<Bytes>>,
}

/// An input with its raw little-endian bytes and the same values as typed `contents`.
fn input(
    name: &str,
    datatype: &str,
    shape: Vec<i64>,
    raw: Vec<u8>,
    contents: InferTensorContents,
) -> (InferInputTensor, Bytes) {
    let tensor = InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape,
        parameters: HashMap::new(),
        contents: Some(contents),
    };
    (tensor, Bytes::from(raw))
}

/// A valid request to one of [`fuzz::ECHO_MODELS`], its data all raw or all typed.
fn valid_case(rng: &mut Rng) -> Case {
    let batched = rng.one_in(2);
    let mut inputs = Vec::new();
    if batched {
        let batch = 1 + rng.below(3) as i64;
        let width = 1 + rng.below(3) as i64;
        let values: Vec<f32> = (0..batch * width)
            .map(|_| f32::from_bits(rng.next_u64() as u32))
            .collect();
        inputs.push(input(
            "INPUT0",
            "FP32",
            vec![batch, width],
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            InferTensorContents {
                fp32_contents: values,
                ..Default::default()
            },
        ));
        {
            let width = rng.below(3) as i64;
            let elements: Vec<Bytes> = (0..batch * width)
                .map(|_| {
                    let len = rng.below(6);
                    Bytes::from(rng.bytes(len))
                })
                .collect();
            inputs.push(input(
                "INPUT1",
                "BYTES",
                vec![batch, width],
                join_bytes_elements(elements.iter().map(|e| e.as_ref())),
                InferTensorContents {
                    bytes_contents: elements,
                    ..Default::default()
                },
            ));
        }
    } else {
        let width = rng.below(4) as i64;
        let ints: Vec<i32> = (0..2 * width).map(|_| rng.next_u64() as i32).collect();
        let count = rng.below(6);
        let small = rng.bytes(count);
        inputs.push(input(
            "INPUT0",
            "INT32",
            vec![2, width],
            ints.iter().flat_map(|v| v.to_le_bytes()).collect(),
            InferTensorContents {
                int_contents: ints,
                ..Default::default()
            },
        ));
        inputs.push(input(
            "INPUT1",
            "UINT8",
            vec![count as i64],
            small.clone(),
            InferTensorContents {
                uint_contents: small.iter().map(|&b| u32::from(b)).collect(),
                ..Default::default()
            },
        ));
    }
    let expected: Vec<Bytes> = inputs.iter().map(|(_, raw)| raw.clone()).collect();
    // Typed contents only where they are non-empty: an empty list is no data at all.
    let typed = rng.one_in(2) && expected.iter().all(|raw| !raw.is_empty());
    let (tensors, raw_input_contents) = if typed {
        (inputs.into_iter().map(|(t, _)| t).collect(), Vec::new())
    } else {
        inputs
            .into_iter()
            .map(|(t, raw)| {
                (
                    InferInputTensor {
                        contents: None,
                        ..t
                    },
                    raw,
                )
            })
            .unzip()
    };
    let outputs = if rng.one_in(2) {
        Vec::new()
    } else {
        (0..expected.len())
            .map(|k| InferRequestedOutputTensor {
                name: format!("OUTPUT{k}"),
                parameters: HashMap::new(),
            })
            .collect()
    };
    let mut parameters = HashMap::new();
    if rng.one_in(3) {
        parameters.insert(
            "custom".to_string(),
            parameter(ParameterChoice::Int64Param(7)),
        );
    }
    Case {
        request: ModelInferRequest {
            model_name: if batched { "batched" } else { "plain" }.into(),
            model_version: if rng.one_in(3) {
                "1".into()
            } else {
                String::new()
            },
            id: format!("r{}", rng.below(100)),
            parameters,
            inputs: tensors,
            outputs,
            raw_input_contents,
        },
        expected: Some(expected),
    }
}

fn parameter(choice: ParameterChoice) -> InferParameter {
    InferParameter {
        parameter_choice: Some(choice),
    }
}

/// A parameter value of any wire type, often a hostile one.
fn any_parameter(rng: &mut Rng) -> InferParameter {
    let choice = match rng.below(7) {
        0 => ParameterChoice::BoolParam(rng.one_in(2)),
        1 => ParameterChoice::Int64Param(rng.hostile_i64()),
        2 => ParameterChoice::Uint64Param(rng.hostile_i64() as u64),
        3 => ParameterChoice::DoubleParam(f64::from_bits(rng.next_u64())),
        4 => ParameterChoice::StringParam(rng.pick(&["", "r", "x", "1"]).to_string()),
        5 => ParameterChoice::Uint64Param(rng.below(64) as u64),
        _ => return InferParameter::default(),
    };
    parameter(choice)
}

const PARAMETER_KEYS: &[&str] = &[
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "triton_enable_empty_final_response",
    "triton_x",
    "shared_memory_region",
    "shared_memory_offset",
    "shared_memory_byte_size",
    "classification",
    "binary_data_size",
    "custom",
];

const DATATYPES: &[&str] = &[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
    "BF16", "FP32", "FP64", "BYTES", "", "FLOAT", "fp32",
];

/// Changes one field of the request at random.
fn mutate_field(rng: &mut Rng, request: &mut ModelInferRequest) {
    let inputs = request.inputs.len();
    match rng.below(12) {
        0 if inputs > 0 => {
            let k = rng.below(inputs);
            request.inputs[k].datatype = rng.pick(DATATYPES).to_string();
        }
        1 if inputs > 0 => {
            let shape = &mut request.inputs[rng.below(inputs)].shape;
            match rng.below(3) {
                0 if !shape.is_empty() => {
                    let d = rng.below(shape.len());
                    shape[d] = rng.hostile_i64();
                }
                1 => shape.push(rng.hostile_i64()),
                _ => {
                    shape.pop();
                }
            }
        }
        2 => {
            let raw = &mut request.raw_input_contents;
            match rng.below(4) {
                0 => {
                    let len = rng.below(64);
                    raw.push(Bytes::from(rng.bytes(len)));
                }
                1 => {
                    raw.pop();
                }
                _ if !raw.is_empty() => {
                    let k = rng.below(raw.len());
                    let mut bytes = raw[k].to_vec();
                    fuzz::mutate(rng, &mut bytes, &[], &[], 4096);
                    raw[k] = Bytes::from(bytes);
                }
                _ => {}
            }
        }
        3 if inputs > 0 => {
            let contents = request.inputs[rng.below(inputs)]
                .contents
                .get_or_insert_with(Default::default);
            match rng.below(6) {
                0 => contents.int_contents.push(rng.hostile_i64() as i32),
                1 => contents.int64_contents.push(rng.hostile_i64()),
                2 => contents.uint_contents.push(rng.hostile_i64() as u32),
                3 => contents.bool_contents.push(true),
                4 => contents.fp64_contents.push(f64::from_bits(rng.next_u64())),
                _ => contents.bytes_contents.push(Bytes::from(rng.bytes(3))),
            }
        }
        4 if inputs > 0 => {
            let k = rng.below(inputs);
            let key = rng.pick(PARAMETER_KEYS).to_string();
            let value = any_parameter(rng);
            request.inputs[k].parameters.insert(key, value);
        }
        5 => {
            let key = rng.pick(PARAMETER_KEYS).to_string();
            let value = any_parameter(rng);
            request.parameters.insert(key, value);
        }
        6 => {
            let name = rng.pick(&["OUTPUT0", "OUTPUT1", "OUTPUT9", ""]).to_string();
            let mut parameters = HashMap::new();
            if rng.one_in(2) {
                let key = rng.pick(PARAMETER_KEYS).to_string();
                parameters.insert(key, any_parameter(rng));
            }
            request
                .outputs
                .push(InferRequestedOutputTensor { name, parameters });
        }
        7 => {
            request.model_version = rng
                .pick(&["", "1", "2", "-1", "x", "99999999999999999999", " 1"])
                .to_string();
        }
        8 => request.model_name = rng.pick(&["", "batched", "plain", "nope"]).to_string(),
        9 if inputs > 0 => {
            let k = rng.below(inputs);
            let copy = request.inputs[k].clone();
            request.inputs.push(copy);
        }
        10 if inputs > 0 => {
            let k = rng.below(inputs);
            request.inputs.remove(k);
        }
        _ => request.inputs.iter_mut().for_each(|i| i.contents = None),
    }
}

/// Generates a valid case, then maybe mutates its fields or its encoded bytes.
fn generate(rng: &mut Rng) -> Case {
    let mut case = valid_case(rng);
    match rng.below(8) {
        0 => {}
        1 => {
            case.expected = None;
            let mut bytes = case.request.encode_to_vec();
            fuzz::mutate(rng, &mut bytes, &[], &[], 1 << 16);
            case.request = ModelInferRequest::decode(bytes.as_slice())
                .unwrap_or_else(|_| valid_case(rng).request);
        }
        _ => {
            case.expected = None;
            for _ in 0..=rng.below(3) {
                mutate_field(rng, &mut case.request);
            }
        }
    }
    case
}

/// The property described in the module doc.
fn check(harness: &Harness, case: &Case) {
    let request = Request::new(case.request.clone());
    let answer = harness
        .runtime
        .block_on(harness.service.model_infer(request));
    match (answer, &case.expected) {
        (Ok(response), Some(expected)) => {
            let response = response.into_inner();
            assert_eq!(
                &response.raw_output_contents, expected,
                "outputs echo inputs"
            );
            for (k, output) in response.outputs.iter().enumerate() {
                assert_eq!(output.name, format!("OUTPUT{k}"));
                assert_eq!(output.shape, case.request.inputs[k].shape);
            }
        }
        (Ok(response), None) => {
            let response = response.into_inner();
            assert_eq!(response.outputs.len(), response.raw_output_contents.len());
        }
        (Err(status), Some(_)) => panic!("a valid request failed: {status:?}"),
        (Err(status), None) => assert!(
            !matches!(status.code(), Code::Internal | Code::Unknown)
                && !status.message().is_empty(),
            "{status:?}"
        ),
    }
}

#[test]
fn model_infer_requests_never_panic() {
    let harness = Harness::start();
    fuzz::run("gRPC ModelInfer", SHORT_RUN, generate, |case, _| {
        check(&harness, case)
    });
}

#[test]
fn random_bytes_decode_or_fail_cleanly() {
    let harness = Harness::start();
    let generate = |rng: &mut Rng| {
        let len = rng.below(256);
        rng.bytes(len)
    };
    fuzz::run("gRPC random bytes", SHORT_RUN, generate, |bytes, _| {
        if let Ok(request) = ModelInferRequest::decode(bytes.as_slice()) {
            check(
                &harness,
                &Case {
                    request,
                    expected: None,
                },
            );
        }
    });
}
