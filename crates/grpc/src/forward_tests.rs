//! `--grpc-header-forward-pattern` end to end: a served port, the generated client, and a
//! test backend recording what reached the model, for `ModelInfer` and `ModelStreamInfer`.

use std::sync::Arc;

use nereid_core::header_forward::HeaderForward;
use nereid_core::request::{ParamValue, Parameters};
use nereid_core::testing::{self, fp32_bytes, TestBackend};
use nereid_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use nereid_proto::inference::infer_parameter::ParameterChoice;
use nereid_proto::inference::model_infer_request::InferInputTensor;
use nereid_proto::inference::{InferParameter, ModelInferRequest};
use tokio::sync::oneshot;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::{Code, Request};

use crate::GrpcOptions;

const CONFIG: &str = r#"backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]"#;

struct Harness {
    client: GrpcInferenceServiceClient<Channel>,
    backend: TestBackend,
    _stop: oneshot::Sender<()>,
    _repo: tempfile::TempDir,
}

impl Harness {
    async fn start(pattern: &str) -> Self {
        let repo = tempfile::tempdir().expect("temp dir");
        testing::write_model(repo.path(), "ident", CONFIG, &[1]);
        let backend = TestBackend::identity();
        let server = testing::server(repo.path(), &backend).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("bound address");
        let options = GrpcOptions {
            header_forward: Some(Arc::new(HeaderForward::new(pattern).expect("valid"))),
            ..GrpcOptions::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async {
            let _ = stopped.await;
        };
        tokio::spawn(crate::serve_with(server, listener, stopped, options));
        let client = GrpcInferenceServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        Self {
            client,
            backend,
            _stop: stop,
            _repo: repo,
        }
    }

    /// The parameters of every request the model ran, in order.
    fn seen(&self) -> Vec<Parameters> {
        let executions = self.backend.executions();
        executions.into_iter().flat_map(|e| e.parameters).collect()
    }
}

fn infer_request() -> ModelInferRequest {
    let body_parameter = InferParameter {
        parameter_choice: Some(ParameterChoice::StringParam("value1".into())),
    };
    ModelInferRequest {
        model_name: "ident".into(),
        parameters: [("key1".to_owned(), body_parameter)].into(),
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "FP32".into(),
            shape: vec![1],
            ..Default::default()
        }],
        raw_input_contents: vec![fp32_bytes(&[1.0])],
        ..Default::default()
    }
}

fn with_metadata<T>(message: T, metadata: &[(&'static str, &'static str)]) -> Request<T> {
    let mut request = Request::new(message);
    for (name, value) in metadata {
        let value = tonic::metadata::MetadataValue::from_static(value);
        request.metadata_mut().insert(*name, value);
    }
    request
}

fn string(name: &str, value: &str) -> (String, ParamValue) {
    (name.to_owned(), ParamValue::String(value.to_owned()))
}

#[tokio::test]
async fn unary_infer_forwards_matching_metadata_after_the_body_parameters() {
    let mut h = Harness::start("^my_header").await;
    let metadata = [("my_header_1", "my_value_1"), ("header_1", "value_1")];
    let request = with_metadata(infer_request(), &metadata);
    h.client.model_infer(request).await.expect("infer");
    let expected = vec![
        string("key1", "value1"),
        string("my_header_1", "my_value_1"),
    ];
    assert_eq!(h.seen(), vec![expected]);
}

#[tokio::test]
async fn unary_infer_refuses_reserved_metadata() {
    let mut h = Harness::start(".*").await;
    let request = with_metadata(infer_request(), &[("priority", "1")]);
    let status = h.client.model_infer(request).await.expect_err("reserved");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "Header 'priority' is reserved for Triton usage and cannot be forwarded."
    );
    assert!(h.seen().is_empty());
}

#[tokio::test]
async fn stream_metadata_reaches_every_request_of_the_stream() {
    let mut h = Harness::start("MY_HEADER").await;
    let requests = tokio_stream::iter(vec![infer_request(), infer_request()]);
    let request = with_metadata(requests, &[("my_header_1", "my_value_1")]);
    let response = h.client.model_stream_infer(request).await.expect("stream");
    let mut inbound = response.into_inner();
    while let Some(message) = inbound.next().await {
        let message = message.expect("no transport error");
        assert_eq!(message.error_message, "");
    }
    let expected = vec![
        string("key1", "value1"),
        string("my_header_1", "my_value_1"),
    ];
    assert_eq!(h.seen(), vec![expected.clone(), expected]);
}
