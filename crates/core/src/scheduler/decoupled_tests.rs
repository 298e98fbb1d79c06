//! Decoupled models through the facade and every scheduler: each request's responses
//! reach its own stream (any number, the final flag with the last one or alone), from the
//! instance thread or later from another one; each request counts once as a success.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::request::{InferRequest, ParamValue};
use crate::response_stream::{ResponseStream, StreamedResponse};
use crate::server::Server;
use crate::testing::{self, Streaming, TestBackend, RESPONSES_PARAMETER};

/// A decoupled INT32 identity model `name` batching up to 4, with `extra` config text.
fn write_decoupled(root: &Path, name: &str, extra: &str) {
    let config = format!(
        r#"backend: "identity" max_batch_size: 4
           input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
           output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
           model_transaction_policy {{ decoupled: true }}
           {extra}"#
    );
    testing::write_model(root, name, &config, &[1]);
}

/// A request to `model` sending `value`, asking for `responses` responses.
fn request(model: &str, id: &str, value: i32, responses: i64) -> InferRequest {
    let mut request = testing::request(
        model,
        id,
        vec![testing::int32_input("INPUT0", &[1, 1], &[value])],
    );
    request
        .parameters
        .push((RESPONSES_PARAMETER.into(), ParamValue::Int(responses)));
    request
}

/// Every message of `stream` until it ends (bounded in time: a stream that never ends
/// fails the test).
async fn collect(mut stream: ResponseStream) -> Vec<StreamedResponse> {
    let mut messages = Vec::new();
    let all = async {
        while let Some(message) = stream.recv().await {
            messages.push(message);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), all)
        .await
        .expect("the stream ends");
    messages
}

/// The OUTPUT0 values of each response, `None` for a final flag alone; panics on an
/// error.
fn values(messages: &[StreamedResponse]) -> Vec<(Option<Vec<i32>>, bool)> {
    messages
        .iter()
        .map(|m| {
            let values = m.result.as_ref().map(|r| {
                let response = r.as_ref().expect("a response, not an error");
                testing::int32s(&response.outputs[0].data)
            });
            (values, m.last)
        })
        .collect()
}

/// Waits until `model` has counted `count` successful requests.
async fn successes(server: &Server, model: &str, count: u64) -> crate::stats::ModelStatsSnapshot {
    let loaded = server.repository().get(model, None).expect("model loaded");
    for _ in 0..1000 {
        let snapshot = loaded.snapshot();
        if snapshot.inference_stats.success.count >= count {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("model '{model}' never counted {count} successes");
}

#[tokio::test]
async fn each_request_gets_its_responses_then_the_final_flag() {
    let repo = tempfile::tempdir().expect("temp dir");
    write_decoupled(repo.path(), "dec", "");
    let backend = TestBackend::identity().failing_on(-1, Error::internal("boom"));
    let server = testing::server(repo.path(), &backend).await;

    let three = collect(
        server
            .submit_stream(request("dec", "a", 7, 3))
            .expect("admitted"),
    )
    .await;
    assert_eq!(
        values(&three),
        vec![
            (Some(vec![7]), false),
            (Some(vec![7]), false),
            (Some(vec![7]), true)
        ]
    );
    let response = three[0]
        .result
        .as_ref()
        .expect("a response")
        .as_ref()
        .expect("success");
    assert_eq!(
        (
            response.model_name.as_str(),
            response.model_version,
            response.id.as_str()
        ),
        ("dec", 1, "a")
    );
    // Reshaped as the config says: the batch dimension and [1].
    assert_eq!(response.outputs[0].shape, vec![1, 1]);

    // No response: the final flag comes alone.
    let none = collect(
        server
            .submit_stream(request("dec", "b", 1, 0))
            .expect("admitted"),
    )
    .await;
    assert_eq!(values(&none), vec![(None, true)]);

    // A failed request: its error is the one and final message.
    let failed = collect(
        server
            .submit_stream(request("dec", "c", -1, 3))
            .expect("admitted"),
    )
    .await;
    assert_eq!(failed.len(), 1);
    assert!(failed[0].last);
    let error = failed[0].result.as_ref().expect("an error").as_ref();
    assert_eq!(error.expect_err("the request fails").message(), "boom");

    // Each request counts once, as a success, whatever it streamed.
    let snapshot = successes(&server, "dec", 3).await;
    assert_eq!(snapshot.inference_stats.success.count, 3);
    assert_eq!(snapshot.inference_count, 3);
    assert_eq!(snapshot.execution_count, 3);
    assert_eq!(snapshot.inference_stats.fail.count, 0);
}

#[tokio::test]
async fn invalid_requests_fail_at_admission() {
    let repo = tempfile::tempdir().expect("temp dir");
    write_decoupled(repo.path(), "dec", "");
    let server = testing::server(repo.path(), &TestBackend::identity()).await;
    let mut wrong = request("dec", "x", 1, 1);
    wrong.inputs[0].datatype = nereid_proto::DataType::Fp32;
    let error = server.submit_stream(wrong).expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::InvalidArg);
    let error = server
        .submit_stream(request("nope", "x", 1, 1))
        .expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::NotFound);
    // The endpoints that answer once refuse the model, as Triton's.
    let error = server
        .infer(request("dec", "x", 1, 1))
        .await
        .expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Unsupported);
    let Err(error) = server.infer_target("dec", None, "HTTP end point") else {
        panic!("a decoupled model must be refused");
    };
    // A model that is not there is reported by the submit, after the body's own errors.
    let Ok(target) = server.infer_target("nope", None, "HTTP end point") else {
        panic!("an unknown model is not refused before the body");
    };
    let unknown = server
        .submit_to(target, request("nope", "x", 1, 1))
        .await
        .expect_err("unknown");
    assert_eq!(unknown.kind(), ErrorKind::NotFound);
    assert_eq!(
        error.message(),
        "HTTP end point doesn't support models with decoupled transaction policy"
    );
}

#[tokio::test]
async fn late_responses_from_another_thread_reach_the_stream() {
    let repo = tempfile::tempdir().expect("temp dir");
    write_decoupled(repo.path(), "dec", "");
    let backend = TestBackend::identity().streaming(Streaming {
        responses: 2,
        final_alone: true,
        late: Some(Duration::from_millis(50)),
    });
    let server = testing::server(repo.path(), &backend).await;
    let first = server
        .submit_stream(request("dec", "a", 1, 2))
        .expect("admitted");
    let second = server
        .submit_stream(request("dec", "b", 2, 1))
        .expect("admitted");
    let (first, second) = tokio::join!(collect(first), collect(second));
    assert_eq!(
        values(&first),
        vec![(Some(vec![1]), false), (Some(vec![1]), false), (None, true)]
    );
    assert_eq!(values(&second), vec![(Some(vec![2]), false), (None, true)]);
    successes(&server, "dec", 2).await;
}

#[tokio::test]
async fn the_dynamic_batcher_splits_a_batch_into_each_request_stream() {
    let repo = tempfile::tempdir().expect("temp dir");
    write_decoupled(
        repo.path(),
        "dec",
        "dynamic_batching { max_queue_delay_microseconds: 2000000 }",
    );
    let backend = TestBackend::identity();
    let server = testing::server(repo.path(), &backend).await;
    // Four requests fill a batch at once; each asks for a different number of responses.
    let streams: Vec<_> = (0..4)
        .map(|i| {
            server
                .submit_stream(request("dec", &i.to_string(), 10 + i, i64::from(i)))
                .expect("admitted")
        })
        .collect();
    for (i, stream) in (0..4).zip(streams) {
        let messages = collect(stream).await;
        let mut expected: Vec<_> = (0..i).map(|_| (Some(vec![10 + i]), false)).collect();
        match expected.last_mut() {
            Some(last) => last.1 = true,
            None => expected.push((None, true)),
        }
        assert_eq!(values(&messages), expected, "request {i}");
    }
    assert_eq!(backend.batch_sizes(), vec![4]);
    let snapshot = successes(&server, "dec", 4).await;
    assert_eq!(snapshot.execution_count, 1);
    assert_eq!(snapshot.inference_count, 4);
}

#[tokio::test]
async fn sequence_requests_stream_and_padding_answers_go_nowhere() {
    let repo = tempfile::tempdir().expect("temp dir");
    write_decoupled(repo.path(), "dec", "sequence_batching { }");
    let backend = TestBackend::identity().streaming(Streaming {
        responses: 2,
        ..Streaming::default()
    });
    let server = testing::server(repo.path(), &backend).await;
    let in_sequence = |id: u64, start: bool, value: i32| {
        let mut request = testing::request(
            "dec",
            &format!("{id}/{value}"),
            vec![testing::int32_input("INPUT0", &[1, 1], &[value])],
        );
        request.parameters = vec![
            ("sequence_id".into(), ParamValue::Uint(id)),
            ("sequence_start".into(), ParamValue::Bool(start)),
        ];
        request
    };
    // Two sequences hold two batch slots; then only the second sends, so the first
    // slot is padded and its answers are dropped.
    for (id, value) in [(1, 1), (2, 2)] {
        let stream = server
            .submit_stream(in_sequence(id, true, value))
            .expect("admitted");
        assert_eq!(
            values(&collect(stream).await),
            vec![(Some(vec![value]), false), (Some(vec![value]), true)]
        );
    }
    let stream = server
        .submit_stream(in_sequence(2, false, 3))
        .expect("admitted");
    assert_eq!(
        values(&collect(stream).await),
        vec![(Some(vec![3]), false), (Some(vec![3]), true)]
    );
    let last = backend.executions().pop().expect("executed");
    assert_eq!(last.batch_size, 2, "the first slot is padded: {last:?}");
    assert!(last.ids.contains(&"2/3".to_string()), "{last:?}");
    let snapshot = successes(&server, "dec", 3).await;
    assert_eq!(
        snapshot.inference_count, 3,
        "padding is not counted for clients"
    );
}

#[tokio::test]
async fn a_model_that_is_not_decoupled_streams_its_one_answer() {
    let repo = tempfile::tempdir().expect("temp dir");
    testing::write_model(
        repo.path(),
        "plain",
        r#"backend: "identity" max_batch_size: 4
           input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]"#,
        &[1],
    );
    let server: Arc<Server> = testing::server(repo.path(), &TestBackend::identity()).await;
    let stream = server
        .submit_stream(request("plain", "p", 5, 3))
        .expect("admitted");
    assert_eq!(values(&collect(stream).await), vec![(Some(vec![5]), true)]);
}
