//! Fuzzing of the infer endpoint through the whole route table (`router()`, driven with
//! `oneshot`, no socket) against a server with two echo models: the JSON body, Triton's
//! binary tensor extension (`Inference-Header-Content-Length`, `binary_data_size`,
//! `binary_data_output`), compression, the model path, down to the core's request
//! validation and back through the response encoder.
//!
//! Each iteration builds a valid request at random. Sent as it is, the echoed outputs
//! must equal the inputs. Mutated (JSON bytes, binary tail, a header length that lies,
//! a wrong encoding or path), the answer must be a success or a Triton error: a 4xx or
//! 501 with a JSON `{"error": "..."}` body, never a 500 from a panic or a broken body.
//! `NEREID_FUZZ_ITERATIONS` sets the iteration count (see docs/src/development.md, "Fuzzing").

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use nereid_core::testing::fuzz::{self, Rng, TrackingAllocator};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::compression::{self, Encoding};
use crate::infer::HEADER_LENGTH;
use crate::{router, HttpOptions};

#[global_allocator]
static ALLOCATOR: TrackingAllocator = TrackingAllocator;

/// Iterations in the test command (a few seconds in release mode).
const SHORT_RUN: u64 = 20_000;

/// The body limit of the fuzzed router; mutations sometimes grow a body past it.
const MAX_BODY: usize = 64 << 10;

/// The router over [`fuzz::echo_server`], with the runtime that serves it.
struct Harness {
    runtime: tokio::runtime::Runtime,
    router: Router,
    _repo: tempfile::TempDir,
}

impl Harness {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let repo = tempfile::tempdir().expect("temp dir");
        let server = runtime.block_on(fuzz::echo_server(repo.path()));
        let options = HttpOptions {
            max_input_size: MAX_BODY,
            limits: nereid_net::Limits::default(),
            restrictions: Default::default(),
            header_forward: None,
        };
        Self {
            runtime,
            router: router(server, options),
            _repo: repo,
        }
    }

    /// Sends `case` and returns the status and the whole answer.
    fn send(&self, case: &Case) -> (StatusCode, axum::http::HeaderMap, bytes::Bytes) {
        let mut request = Request::post(&case.path);
        for (name, value) in &case.headers {
            request = request.header(name.as_str(), value.as_slice());
        }
        let request = request
            .body(Body::from(case.body.clone()))
            .expect("generated headers are valid");
        self.runtime.block_on(async {
            let response = self
                .router
                .clone()
                .oneshot(request)
                .await
                .expect("the router is infallible");
            let (parts, body) = response.into_parts();
            let body = to_bytes(body, usize::MAX).await.expect("a buffered body");
            (parts.status, parts.headers, body)
        })
    }
}

/// One input as sent: its datatype and shape, and the raw little-endian bytes the
/// echoed output must carry.
#[derive(Debug, Clone)]
struct SentInput {
    name: &'static str,
    datatype: &'static str,
    shape: Vec<i64>,
    raw: Vec<u8>,
    /// The JSON `data` form, or `None` to send `raw` in the binary tail.
    json: Option<Value>,
}

/// One generated request: what goes on the wire, and for an unmutated one the inputs
/// the answer must echo and whether outputs come back binary.
struct Case {
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    expected: Option<(Vec<SentInput>, Vec<bool>)>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let headers: Vec<(&str, String)> = self
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), text(v)))
            .collect();
        f.debug_struct("Case")
            .field("path", &self.path)
            .field("headers", &headers)
            .field("body", &text(&self.body))
            .field("expected", &self.expected)
            .finish()
    }
}

fn fp32_input(rng: &mut Rng, batch: i64, width: i64) -> SentInput {
    // Quarters of small integers are exact in JSON and FP32 both ways.
    let values: Vec<f32> = (0..batch * width)
        .map(|_| (rng.below(4001) as f32 - 2000.0) / 4.0)
        .collect();
    SentInput {
        name: "INPUT0",
        datatype: "FP32",
        shape: vec![batch, width],
        raw: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        json: Some(json!(values)),
    }
}

fn bytes_input(rng: &mut Rng, batch: i64, width: i64, binary: bool) -> SentInput {
    let elements: Vec<Vec<u8>> = (0..batch * width)
        .map(|_| {
            let len = rng.below(6);
            if binary {
                rng.bytes(len)
            } else {
                (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
            }
        })
        .collect();
    let raw = nereid_core::request::join_bytes_elements(elements.iter().map(Vec::as_slice));
    let strings: Vec<String> = elements
        .iter()
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect();
    SentInput {
        name: "INPUT1",
        datatype: "BYTES",
        shape: vec![batch, width],
        raw,
        json: Some(json!(strings)),
    }
}

fn plain_inputs(rng: &mut Rng) -> Vec<SentInput> {
    let width = rng.below(4) as i64;
    let ints: Vec<i32> = (0..2 * width).map(|_| rng.next_u64() as i32).collect();
    let count = rng.below(6);
    let small: Vec<u8> = rng.bytes(count);
    vec![
        SentInput {
            name: "INPUT0",
            datatype: "INT32",
            shape: vec![2, width],
            raw: ints.iter().flat_map(|v| v.to_le_bytes()).collect(),
            json: Some(json!(ints)),
        },
        SentInput {
            name: "INPUT1",
            datatype: "UINT8",
            shape: vec![count as i64],
            raw: small.clone(),
            json: Some(json!(small)),
        },
    ]
}

/// A valid request to one of [`fuzz::ECHO_MODELS`], every input in JSON or binary at random.
fn valid_case(rng: &mut Rng) -> Case {
    let batched = rng.one_in(2);
    let mut inputs = if batched {
        let batch = 1 + rng.below(3) as i64;
        let width = 1 + rng.below(3) as i64;
        let mut inputs = vec![fp32_input(rng, batch, width)];
        {
            let binary = rng.one_in(2);
            let width = rng.below(3) as i64;
            inputs.push(bytes_input(rng, batch, width, binary));
            inputs[1].json = inputs[1].json.take().filter(|_| !binary);
        }
        inputs
    } else {
        plain_inputs(rng)
    };
    let mut binary_tail = Vec::new();
    let mut inputs_json = Vec::new();
    for input in &mut inputs {
        if input.json.is_some() && rng.one_in(2) {
            input.json = None;
        }
        let mut entry =
            json!({"name": input.name, "datatype": input.datatype, "shape": input.shape});
        match &input.json {
            Some(data) => entry["data"] = data.clone(),
            None => {
                entry["parameters"] = json!({"binary_data_size": input.raw.len()});
                binary_tail.extend_from_slice(&input.raw);
            }
        }
        inputs_json.push(entry);
    }
    let binary_default = rng.one_in(3);
    let mut request = json!({"inputs": inputs_json});
    if binary_default || rng.one_in(3) {
        request["parameters"] = json!({"binary_data_output": binary_default, "custom": 7});
    }
    if rng.one_in(2) {
        request["id"] = json!(format!("r{}", rng.below(100)));
    }
    // Output k echoes input k; ask for all of them, by name or by default.
    let mut binary_outputs = vec![binary_default; inputs.len()];
    if rng.one_in(2) {
        let outputs: Vec<Value> = (0..inputs.len())
            .map(|k| {
                let binary = rng.one_in(2);
                binary_outputs[k] = binary;
                json!({"name": format!("OUTPUT{k}"), "parameters": {"binary_data": binary}})
            })
            .collect();
        request["outputs"] = json!(outputs);
    }
    let mut body = serde_json::to_vec(&request).expect("JSON values serialize");
    let mut headers = vec![("content-type".to_string(), b"application/json".to_vec())];
    if !binary_tail.is_empty() {
        headers.push((
            HEADER_LENGTH.to_string(),
            body.len().to_string().into_bytes(),
        ));
        body.extend_from_slice(&binary_tail);
    }
    let model = if batched { "batched" } else { "plain" };
    Case {
        path: format!("/v2/models/{model}/infer"),
        headers,
        body,
        expected: Some((inputs, binary_outputs)),
    }
}

/// Mutates the body, a header or the path of a valid case.
fn mutate(rng: &mut Rng, case: &mut Case, seeds: &[&[u8]]) {
    case.expected = None;
    let json_len = case
        .headers
        .iter()
        .find(|(n, _)| n == HEADER_LENGTH)
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<usize>().ok())
        .unwrap_or(case.body.len());
    match rng.below(10) {
        0..=4 => {
            // The JSON part, keeping the header length truthful.
            let mut json = case.body[..json_len].to_vec();
            let tail = case.body.split_off(json_len);
            fuzz::mutate(rng, &mut json, seeds, &TOKENS, MAX_BODY / 2);
            let new_len = json.len();
            case.body = json;
            case.body.extend_from_slice(&tail);
            for (name, value) in &mut case.headers {
                if name == HEADER_LENGTH {
                    *value = new_len.to_string().into_bytes();
                }
            }
        }
        5 => fuzz::mutate(rng, &mut case.body, seeds, &TOKENS, MAX_BODY),
        6 => {
            let lie = match rng.below(4) {
                0 => rng.hostile_i64().to_string(),
                1 => (json_len as i64 + rng.below(9) as i64 - 4).to_string(),
                // Bytes a header value may hold (no controls).
                2 => (0..3)
                    .map(|_| char::from(b' ' + rng.below(95) as u8))
                    .collect(),
                _ => String::new(),
            };
            case.headers.retain(|(n, _)| n != HEADER_LENGTH);
            case.headers
                .push((HEADER_LENGTH.to_string(), lie.into_bytes()));
        }
        7 => {
            let (encoding, packed) = if rng.one_in(2) {
                (
                    Encoding::Gzip,
                    compression::encode(Encoding::Gzip, &case.body),
                )
            } else {
                (Encoding::Deflate, case.body.clone())
            };
            case.body = packed;
            if rng.one_in(3) {
                fuzz::mutate(rng, &mut case.body, &[], &[], MAX_BODY);
            }
            case.headers.push((
                "content-encoding".to_string(),
                encoding.token().as_bytes().to_vec(),
            ));
        }
        8 => {
            case.path = rng
                .pick(&[
                    "/v2/models/batched/versions/1/infer",
                    "/v2/models/plain/versions/7/infer",
                    "/v2/models/plain/versions/-1/infer",
                    "/v2/models/plain/versions/99999999999999999999/infer",
                    "/v2/models/nope/infer",
                    "/v2/models//infer",
                ])
                .to_string();
        }
        _ => {
            let extra = if rng.one_in(8) {
                MAX_BODY
            } else {
                rng.below(64)
            };
            let bytes = rng.bytes(extra);
            case.body.extend_from_slice(&bytes);
        }
    }
}

/// Names and values the JSON mutations splice in.
const TOKENS: [&str; 20] = [
    "\"binary_data_size\":",
    "\"binary_data\":true",
    "\"binary_data_output\":true",
    "\"shared_memory_region\":\"r\"",
    "\"shared_memory_byte_size\":16",
    "\"shared_memory_offset\":8",
    "\"classification\":1",
    "\"sequence_id\":",
    "\"sequence_start\":true",
    "\"priority\":",
    "\"timeout\":",
    "\"triton_x\":1",
    "\"parameters\":{}",
    "\"data\":",
    "\"shape\":[",
    "\"datatype\":\"BYTES\"",
    "\"datatype\":\"FP16\"",
    "\"name\":\"INPUT1\"",
    "\"outputs\":[{\"name\":\"OUTPUT0\"}]",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1",
];

/// One output of a 200 answer.
struct Answered {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    raw: Vec<u8>,
    /// Sent in the binary tail rather than as JSON `data`.
    binary: bool,
}

/// The outputs of a 200 answer.
fn decoded_outputs(headers: &axum::http::HeaderMap, body: &[u8]) -> Vec<Answered> {
    let json_len = headers
        .get(HEADER_LENGTH)
        .map(|v| {
            v.to_str()
                .expect("ASCII")
                .parse::<usize>()
                .expect("a length")
        })
        .unwrap_or(body.len());
    assert!(json_len <= body.len(), "header length past the body");
    let parsed: Value = serde_json::from_slice(&body[..json_len]).expect("a JSON answer");
    let mut tail = &body[json_len..];
    let mut out = Vec::new();
    for o in parsed["outputs"].as_array().expect("outputs") {
        let name = o["name"].as_str().expect("name").to_string();
        let datatype = o["datatype"].as_str().expect("datatype").to_string();
        let shape: Vec<i64> = serde_json::from_value(o["shape"].clone()).expect("shape");
        let (raw, binary) = match o["parameters"]["binary_data_size"].as_u64() {
            Some(n) => {
                let (part, rest) = tail.split_at(n as usize);
                tail = rest;
                (part.to_vec(), true)
            }
            None => {
                let text = o["data"].to_string();
                let datatype = nereid_core::DataType::parse(&datatype).expect("a datatype");
                (
                    crate::json_data::parse_data(datatype, &text).expect("data"),
                    false,
                )
            }
        };
        out.push(Answered {
            name,
            datatype,
            shape,
            raw,
            binary,
        });
    }
    assert!(tail.is_empty(), "binary tail longer than the outputs");
    out
}

/// The property described in the module doc.
fn check(harness: &Harness, case: &Case) {
    let (status, headers, body) = harness.send(case);
    if let Some((inputs, binary)) = &case.expected {
        // A BYTES output that is not UTF-8 can't be JSON text: asked for as JSON, it is a 400
        // that says so (never replacement characters).
        let not_text = inputs.iter().zip(binary).any(|(input, &binary)| {
            !binary
                && input.datatype == "BYTES"
                && nereid_core::request::split_bytes_elements(&input.raw)
                    .expect("well-formed")
                    .iter()
                    .any(|e| std::str::from_utf8(e).is_err())
        });
        if not_text {
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{}",
                String::from_utf8_lossy(&body)
            );
            let error: Value = serde_json::from_slice(&body).expect("a JSON error");
            let message = error["error"].as_str().expect("an error message");
            assert!(message.contains("is not valid UTF-8"), "{message}");
            return;
        }
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let outputs = decoded_outputs(&headers, &body);
        assert_eq!(outputs.len(), inputs.len());
        for (k, input) in inputs.iter().enumerate() {
            let output = outputs
                .iter()
                .find(|o| o.name == format!("OUTPUT{k}"))
                .expect("every output answered");
            assert_eq!(output.datatype, input.datatype);
            assert_eq!(output.shape, input.shape);
            assert_eq!(output.binary, binary[k]);
            // Exact, JSON BYTES included (those reaching here are UTF-8).
            assert_eq!(
                output.raw, input.raw,
                "{} echoes {}",
                output.name, input.name
            );
        }
        return;
    }
    if status == StatusCode::OK {
        decoded_outputs(&headers, &body);
        return;
    }
    assert!(
        status.is_client_error() || status == StatusCode::NOT_IMPLEMENTED,
        "status {status}: {}",
        String::from_utf8_lossy(&body)
    );
    let error: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("status {status} without a JSON body ({e}): {body:?}"));
    assert!(
        error["error"].as_str().is_some_and(|m| !m.is_empty()),
        "status {status}: {error}"
    );
    assert_eq!(
        headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..]),
        "status {status}"
    );
}

#[test]
fn infer_bodies_and_binary_tensors_never_panic() {
    let harness = Harness::start();
    let mut seed_rng = Rng::new(1);
    let seeds: Vec<Vec<u8>> = (0..16).map(|_| valid_case(&mut seed_rng).body).collect();
    let seeds: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
    let generate = |rng: &mut Rng| {
        let mut case = valid_case(rng);
        if !rng.one_in(8) {
            mutate(rng, &mut case, &seeds);
        }
        case
    };
    fuzz::run("HTTP infer", SHORT_RUN, generate, |case, _| {
        check(&harness, case)
    });
}
