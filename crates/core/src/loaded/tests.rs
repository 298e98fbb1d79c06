//! A loaded model end to end over the test backend: submission through the default
//! scheduler, statistics after success, failure and validation rejection, the requested
//! output selection, and the response cache path.

use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::cache::local::LocalCache;
use crate::error::ErrorKind;
use crate::request::OutputTensor;
use crate::testing::{self, int32s, Outputs, TestBackend};

/// Model `m`: INT32 input `IN` echoed to both `OUT0` and `OUT1`; a request starting with
/// -1 fails in the backend.
fn model(cache: Option<Arc<ResponseCache>>) -> (Arc<LoadedModel>, TestBackend) {
    let backend = TestBackend::echo(&[("IN", "OUT0"), ("IN", "OUT1")])
        .failing_on(-1, Error::internal("boom"));
    (serve(&backend, cache), backend)
}

/// Model `m` (one input, outputs `OUT0` and `OUT1`) served by `backend`.
fn serve(backend: &TestBackend, cache: Option<Arc<ResponseCache>>) -> Arc<LoadedModel> {
    let config = testing::config(
        "m",
        r#"backend: "identity" max_batch_size: 4
           input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
           output [ { name: "OUT0" data_type: TYPE_INT32 dims: [ -1 ] },
                    { name: "OUT1" data_type: TYPE_INT32 dims: [ -1 ] } ]"#,
    );
    testing::serve(config, backend, cache)
}

fn request(id: &str, values: &[i32]) -> InferRequest {
    testing::request(
        "m",
        id,
        vec![testing::int32_input(
            "IN",
            &[1, values.len() as i64],
            values,
        )],
    )
}

fn names(response: &InferResponse) -> Vec<&str> {
    response.outputs.iter().map(|o| o.name.as_str()).collect()
}

#[tokio::test]
async fn success_and_backend_failure_are_counted() {
    let (m, backend) = model(None);
    let response = m
        .clone()
        .submit(request("a", &[1, 2]), Instant::now())
        .await
        .expect("ok");
    assert_eq!(
        (response.model_name.as_str(), response.model_version),
        ("m", 1)
    );
    assert_eq!(response.id, "a");
    assert_eq!(
        names(&response),
        vec!["OUT0", "OUT1"],
        "every output, model order"
    );
    assert_eq!(int32s(&response.outputs[1].data), vec![1, 2]);
    assert_eq!(response.outputs[1].shape, vec![1, 2]);

    let e = m
        .clone()
        .submit(request("b", &[-1]), Instant::now())
        .await
        .expect_err("fails");
    assert_eq!((e.kind(), e.message()), (ErrorKind::Internal, "boom"));

    let s = m.snapshot();
    assert_eq!(
        (s.name.as_str(), s.version, s.cache_enabled),
        ("m", 1, false)
    );
    assert_eq!(s.inference_stats.success.count, 1);
    assert_eq!(s.inference_stats.fail.count, 1);
    assert_eq!(s.failures, [1, 0, 0, 0], "counted as BACKEND");
    // The failed request was executed too.
    assert_eq!((s.inference_count, s.execution_count, s.pending), (2, 2, 0));
    assert_eq!(backend.batch_sizes(), vec![1, 1]);
}

#[tokio::test]
async fn a_request_rejected_by_validation_counts_neither_way() {
    let (m, backend) = model(None);
    let wrong_type = testing::request("m", "a", vec![testing::fp32_input("IN", &[1, 1], &[1.0])]);
    let mut unknown_output = request("b", &[1]);
    unknown_output.requested_outputs = Some(vec!["NOPE".into()]);
    for bad in [wrong_type, unknown_output] {
        let e = m
            .clone()
            .submit(bad, Instant::now())
            .await
            .expect_err("invalid");
        assert_eq!(e.kind(), ErrorKind::InvalidArg, "{}", e.message());
    }
    let s = m.snapshot();
    assert_eq!(s.inference_stats.success.count, 0);
    assert_eq!(s.inference_stats.fail.count, 0);
    assert_eq!((s.failures, s.pending, s.execution_count), ([0; 4], 0, 0));
    assert!(
        backend.executions().is_empty(),
        "nothing reached the backend"
    );
}

#[tokio::test]
async fn requested_outputs_are_selected_in_the_requested_order() {
    let (m, _) = model(None);
    let mut one = request("a", &[3]);
    one.requested_outputs = Some(vec!["OUT1".into()]);
    let response = m.clone().submit(one, Instant::now()).await.expect("ok");
    assert_eq!(names(&response), vec!["OUT1"]);
    let mut reversed = request("b", &[3]);
    reversed.requested_outputs = Some(vec!["OUT1".into(), "OUT0".into()]);
    let response = m.submit(reversed, Instant::now()).await.expect("ok");
    assert_eq!(names(&response), vec!["OUT1", "OUT0"]);
}

#[tokio::test]
async fn a_requested_output_the_backend_did_not_produce_is_left_out() {
    // Triton's response holds what the backend produced; an ensemble passes the missing
    // output on as an absent tensor (L0_optional_input, L0_simple_ensemble).
    let only_out0 = TestBackend::new(Outputs::Fixed(vec![OutputTensor {
        name: "OUT0".into(),
        datatype: nereid_proto::DataType::Int32,
        shape: vec![1, 1],
        data: testing::int32_bytes(&[8]),
        device: None,
    }]));
    let m = serve(&only_out0, None);
    let response = m
        .clone()
        .submit(request("a", &[1, 2, 3]), Instant::now())
        .await
        .expect("ok");
    assert_eq!(names(&response), vec!["OUT0"]);
    assert_eq!(
        int32s(&response.outputs[0].data),
        vec![8],
        "the fixed answer"
    );
    let mut wants_both = request("b", &[1]);
    wants_both.requested_outputs = Some(vec!["OUT1".into(), "OUT0".into()]);
    let response = m
        .clone()
        .submit(wants_both, Instant::now())
        .await
        .expect("answered");
    assert_eq!(names(&response), vec!["OUT0"]);
    let s = m.snapshot();
    assert_eq!(
        (s.inference_stats.success.count, s.failures),
        (2, [0, 0, 0, 0])
    );
}

#[tokio::test]
async fn a_cache_hit_skips_the_model_and_still_selects_outputs() {
    let cache = Arc::new(ResponseCache::new(Arc::new(
        LocalCache::new(1 << 20).expect("cache"),
    )));
    let (m, backend) = model(Some(cache));
    assert!(m.uses_cache());
    let first = m
        .clone()
        .submit(request("a", &[5, 6]), Instant::now())
        .await
        .expect("miss");
    let mut again = request("b", &[5, 6]);
    again.requested_outputs = Some(vec!["OUT1".into()]);
    let hit = m.clone().submit(again, Instant::now()).await.expect("hit");
    assert_eq!(
        hit.id, "b",
        "the id is the request's own, not the cached one's"
    );
    assert_eq!(names(&hit), vec!["OUT1"]);
    assert_eq!(hit.outputs[0], first.outputs[1]);
    // A hit for every output answers with the list the cache keeps, not a copy.
    let hits: Vec<_> = futures::future::join_all(
        ["d", "e"].map(|id| m.clone().submit(request(id, &[5, 6]), Instant::now())),
    )
    .await
    .into_iter()
    .map(|hit| hit.expect("hit").outputs.shared())
    .collect();
    assert!(Arc::ptr_eq(&hits[0], &hits[1]));
    assert_eq!(*hits[0], *first.outputs);
    // A failure is not cached: the same failing input runs the model each time.
    for _ in 0..2 {
        m.clone()
            .submit(request("c", &[-1]), Instant::now())
            .await
            .expect_err("fails");
    }
    assert_eq!(
        backend.batch_sizes(),
        vec![1, 1, 1],
        "the hit did not execute"
    );
    let s = m.snapshot();
    assert!(s.cache_enabled);
    assert_eq!(s.inference_stats.cache_hit.count, 3);
    assert_eq!(s.inference_stats.cache_miss.count, 1);
    assert_eq!(
        s.inference_stats.success.count, 4,
        "a hit counts as a success"
    );
    assert_eq!(
        (s.inference_count, s.execution_count),
        (3, 3),
        "but not as an inference"
    );
}

/// The records of trace file `<file>.<index>` (written once its request lets go of its
/// trace, which the instance thread may do just after answering): (timestamp names,
/// tensor activity and name pairs).
fn trace_records(file: &std::path::Path, request_id: &str) -> (Vec<String>, Vec<(String, String)>) {
    // Each trace is in its own `<file>.<n>`, numbered in the order the traces ended,
    // which need not be the order the requests were answered in.
    let has_id = |records: &[serde_json::Value]| {
        records
            .iter()
            .any(|r| r["request_id"].as_str() == Some(request_id))
    };
    let mut found = None;
    for _ in 0..200 {
        found = (0..8).find_map(|index| {
            let text = std::fs::read_to_string(format!("{}.{index}", file.display())).ok()?;
            let records: Vec<serde_json::Value> = serde_json::from_str(&text).ok()?;
            has_id(&records).then_some(records)
        });
        if found.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let records = found.expect("trace written");
    let text_of = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let names = records
        .iter()
        .filter_map(|r| r["timestamps"][0]["name"].as_str())
        .map(str::to_string)
        .collect();
    let tensors = records
        .iter()
        .filter(|r| r["activity"].is_string())
        .map(|r| (text_of(&r["activity"]), text_of(&r["tensor"]["name"])))
        .collect();
    (names, tensors)
}

#[tokio::test]
async fn a_traced_cache_hit_is_queued_once_and_records_the_cached_outputs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("trace.json");
    let manager = crate::testing::trace_every_request(&file, true);
    let cache = Arc::new(ResponseCache::new(Arc::new(
        LocalCache::new(1 << 20).expect("cache"),
    )));
    let (m, _) = model(Some(cache));
    for id in ["miss", "hit"] {
        let mut request = request(id, &[5, 6]);
        request.trace = manager.sample("m");
        m.clone()
            .submit(request, Instant::now())
            .await
            .expect("answered");
    }
    let tensor = |activity: &str, name: &str| (activity.to_string(), name.to_string());
    let queued = [
        tensor("TENSOR_QUEUE_INPUT", "IN"),
        tensor("TENSOR_BACKEND_INPUT", "IN"),
    ];
    let produced = [
        tensor("TENSOR_BACKEND_OUTPUT", "OUT0"),
        tensor("TENSOR_BACKEND_OUTPUT", "OUT1"),
    ];
    // The miss: queued before its lookup, not again on its way to the model.
    let (names, tensors) = trace_records(&file, "miss");
    assert_eq!(
        names,
        [
            "REQUEST_START",
            "QUEUE_START",
            "COMPUTE_START",
            "COMPUTE_INPUT_END",
            "COMPUTE_OUTPUT_START",
            "COMPUTE_END",
            "REQUEST_END"
        ]
    );
    assert_eq!(tensors, [&queued[..], &produced[..]].concat());
    // The hit: queued, answered from the cache with its outputs, never computed.
    let (names, tensors) = trace_records(&file, "hit");
    assert_eq!(names, ["REQUEST_START", "QUEUE_START", "REQUEST_END"]);
    assert_eq!(tensors, [&queued[..1], &produced[..]].concat());
}

/// Model `r`: INT32 `IN` with dims [4] and reshape [2, 2], echoed to `OUT0` (dims [4],
/// reshape [2, 2]) and to `OUT1` (dims [2, 2], no reshape: what the backend saw).
fn reshaped(cache: Option<Arc<ResponseCache>>) -> Arc<LoadedModel> {
    let config = testing::config(
        "r",
        r#"backend: "identity" max_batch_size: 4
           input [ { name: "IN" data_type: TYPE_INT32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
           output [ { name: "OUT0" data_type: TYPE_INT32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } },
                    { name: "OUT1" data_type: TYPE_INT32 dims: [ 2, 2 ] } ]"#,
    );
    let backend = TestBackend::echo(&[("IN", "OUT0"), ("IN", "OUT1")]);
    testing::serve(config, &backend, cache)
}

#[tokio::test]
async fn reshape_gives_the_backend_its_shape_and_the_client_dims() {
    let cache = Arc::new(ResponseCache::new(Arc::new(
        LocalCache::new(1 << 20).expect("cache"),
    )));
    for cache in [None, Some(cache)] {
        let m = reshaped(cache);
        let values: Vec<i32> = (0..8).collect();
        // Twice: with the cache, the second answer is a hit and keeps the client shape.
        for id in ["a", "b"] {
            let input = testing::int32_input("IN", &[2, 4], &values);
            let request = testing::request("r", id, vec![input]);
            let response = m.clone().submit(request, Instant::now()).await.expect("ok");
            assert_eq!(response.outputs[0].shape, vec![2, 4], "dims, batch kept");
            assert_eq!(
                response.outputs[1].shape,
                vec![2, 2, 2],
                "the backend's view"
            );
            assert_eq!(int32s(&response.outputs[0].data), values);
        }
    }
}
