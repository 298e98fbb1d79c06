//! End-to-end tests: the service on `127.0.0.1:0` with a tiny identity backend, driven by
//! the generated tonic client.

use std::sync::Arc;

use nereid_core::server::ServerIdentity;
use nereid_core::testing::{self, fp32_bytes, TestBackend, MODEL_FILE};
use nereid_core::trace::TraceManager;
use nereid_core::{ControlMode, ModelRepository};
use nereid_proto::health::health_client::HealthClient;
use nereid_proto::health::HealthCheckRequest;
use nereid_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use nereid_proto::inference::infer_parameter::ParameterChoice;
use nereid_proto::inference::model_infer_request::InferInputTensor;
use nereid_proto::inference::*;
use tokio::sync::oneshot;
use tokio_stream::StreamExt;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;
use tonic::Code;

/// A running service and its clients; dropping it stops the service.
pub(crate) struct Harness {
    /// The inference client.
    pub(crate) client: GrpcInferenceServiceClient<Channel>,
    health: HealthClient<Channel>,
    _stop: oneshot::Sender<()>,
    _repo: tempfile::TempDir,
}

/// The `ident` model: FP32 `INPUT0` echoed to `OUTPUT0`.
pub(crate) const CONFIG: &str = r#"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"#;

async fn start(control_mode: ControlMode) -> Harness {
    start_with(control_mode, &[("ident", CONFIG)], &TestBackend::identity()).await
}

/// The service over a repository of `models` (name, config text) served by `backend`.
pub(crate) async fn start_with(
    control_mode: ControlMode,
    models: &[(&str, &str)],
    backend: &TestBackend,
) -> Harness {
    start_traced(control_mode, models, backend, TraceManager::disabled()).await
}

/// [`start_with`], tracing as `trace` says.
pub(crate) async fn start_traced(
    control_mode: ControlMode,
    models: &[(&str, &str)],
    backend: &TestBackend,
    trace: TraceManager,
) -> Harness {
    let repo = tempfile::tempdir().expect("temp dir");
    for (name, config) in models {
        testing::write_model(repo.path(), name, config, &[1]);
    }
    let backends = backend.registry();
    let options = testing::repository_options(repo.path(), control_mode, &["*"]);
    let repository = Arc::new(ModelRepository::new(options, backends));
    repository.load_startup_models().await.expect("models load");
    let identity = ServerIdentity {
        name: "nereid".into(),
        version: "0.0.0".into(),
    };
    let server = Arc::new(nereid_core::Server::new(identity, repository, true).with_trace(trace));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("bound address");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(crate::serve(server, listener, async {
        let _ = stopped.await;
    }));
    let url = format!("http://{addr}");
    let client = GrpcInferenceServiceClient::connect(url.clone())
        .await
        .expect("connect");
    let health = HealthClient::connect(url).await.expect("connect");
    Harness {
        client,
        health,
        _stop: stop,
        _repo: repo,
    }
}

fn infer_request(id: &str, values: &[f32]) -> ModelInferRequest {
    ModelInferRequest {
        model_name: "ident".into(),
        id: id.into(),
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "FP32".into(),
            shape: vec![1, values.len() as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![fp32_bytes(values)],
        ..Default::default()
    }
}

#[tokio::test]
async fn health_metadata_and_readiness() {
    let mut h = start(ControlMode::None).await;
    let live = h
        .client
        .server_live(ServerLiveRequest {})
        .await
        .expect("live");
    assert!(live.get_ref().live);
    let ready = h
        .client
        .server_ready(ServerReadyRequest {})
        .await
        .expect("ready");
    assert!(ready.get_ref().ready);
    let check = h
        .health
        .check(HealthCheckRequest::default())
        .await
        .expect("health");
    assert_eq!(check.get_ref().status, 1, "SERVING");
    let meta = h
        .client
        .server_metadata(ServerMetadataRequest {})
        .await
        .expect("metadata");
    assert_eq!(meta.get_ref().name, "nereid");
    assert!(meta
        .get_ref()
        .extensions
        .contains(&"statistics".to_string()));

    let model_ready = |name: &str, version: &str| ModelReadyRequest {
        name: name.into(),
        version: version.into(),
    };
    let r = h.client.model_ready(model_ready("ident", "")).await;
    assert!(r.expect("ready").get_ref().ready);
    let r = h.client.model_ready(model_ready("nope", "")).await;
    assert!(!r.expect("unknown model is not an error").get_ref().ready);
    let r = h.client.model_ready(model_ready("ident", "x")).await;
    assert_eq!(r.expect_err("bad version").code(), Code::InvalidArgument);

    let m = h
        .client
        .model_metadata(ModelMetadataRequest {
            name: "ident".into(),
            version: String::new(),
        })
        .await
        .expect("model metadata");
    let m = m.get_ref();
    assert_eq!(m.versions, vec!["1".to_string()]);
    assert_eq!(m.inputs[0].datatype, "FP32");
    assert_eq!(m.inputs[0].shape, vec![-1, -1]);
    let e = h
        .client
        .model_metadata(ModelMetadataRequest {
            name: "nope".into(),
            version: String::new(),
        })
        .await
        .expect_err("unknown model");
    assert_eq!(e.code(), Code::NotFound);

    let c = h
        .client
        .model_config(ModelConfigRequest {
            name: "ident".into(),
            version: "1".into(),
        })
        .await
        .expect("config");
    let config = c.get_ref().config.as_ref().expect("config set");
    assert_eq!(config.max_batch_size, 8);
}

#[tokio::test]
async fn infer_round_trip_and_statistics() {
    let mut h = start(ControlMode::None).await;
    let response = h
        .client
        .model_infer(infer_request("r1", &[1.0, 2.0]))
        .await
        .expect("infer");
    let r = response.get_ref();
    assert_eq!(r.model_name, "ident");
    assert_eq!(r.model_version, "1");
    assert_eq!(r.id, "r1");
    assert_eq!(r.outputs[0].name, "OUTPUT0");
    assert_eq!(r.outputs[0].datatype, "FP32");
    assert_eq!(r.outputs[0].shape, vec![1, 2]);
    assert_eq!(r.raw_output_contents[0], fp32_bytes(&[1.0, 2.0]));

    let mut typed = infer_request("r2", &[3.0]);
    typed.raw_input_contents.clear();
    typed.inputs[0].contents = Some(InferTensorContents {
        fp32_contents: vec![3.0],
        ..Default::default()
    });
    let response = h.client.model_infer(typed).await.expect("typed infer");
    assert_eq!(
        response.get_ref().raw_output_contents[0],
        fp32_bytes(&[3.0])
    );

    let mut bad = infer_request("r3", &[1.0]);
    bad.parameters.insert(
        "sequence_id".into(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::BoolParam(true)),
        },
    );
    let e = h.client.model_infer(bad).await.expect_err("bad parameter");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
    );

    let mut unknown = infer_request("r4", &[1.0]);
    unknown.model_name = "nope".into();
    let e = h.client.model_infer(unknown).await.expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound);

    // Larger than tonic's 4 MiB default limit.
    let big: Vec<f32> = (0..(2 << 20)).map(|i| i as f32).collect();
    let mut client = h.client.clone().max_decoding_message_size(usize::MAX);
    let response = client
        .model_infer(infer_request("big", &big))
        .await
        .expect("large request");
    assert_eq!(response.get_ref().raw_output_contents[0], fp32_bytes(&big));
    // Compressed requests are accepted.
    let mut gzip = h.client.clone().send_compressed(CompressionEncoding::Gzip);
    let response = gzip
        .model_infer(infer_request("gzip", &[4.0]))
        .await
        .expect("compressed request");
    assert_eq!(
        response.get_ref().raw_output_contents[0],
        fp32_bytes(&[4.0])
    );

    let stats = h
        .client
        .model_statistics(ModelStatisticsRequest::default())
        .await
        .expect("statistics");
    let s = &stats.get_ref().model_stats[0];
    assert_eq!(s.name, "ident");
    assert_eq!(s.version, "1");
    let success = s.inference_stats.and_then(|i| i.success).expect("success");
    assert_eq!(success.count, 4);
    assert_eq!(s.inference_count, 4);
}

#[tokio::test]
async fn stream_answers_every_request_in_arrival_order_and_survives_errors() {
    let mut h = start(ControlMode::None).await;
    // Requests that fail at decode are answered at once, so without ordering they
    // would overtake the model's answers to earlier requests.
    let requests: Vec<_> = (0..60)
        .map(|i| {
            let mut request = infer_request(&i.to_string(), &[i as f32, 1.0]);
            if i % 3 == 1 {
                request.inputs[0].datatype = "INT32".into();
            }
            request
        })
        .collect();
    let response = h
        .client
        .model_stream_infer(tokio_stream::iter(requests))
        .await
        .expect("stream");
    let mut inbound = response.into_inner();
    let mut seen = Vec::new();
    while let Some(message) = inbound.next().await {
        let message = message.expect("no transport error");
        let response = message.infer_response.expect("always set");
        let i: usize = response.id.parse().expect("numeric id");
        if i % 3 == 1 {
            assert!(message.error_message.contains("data-type is 'INT32'"));
        } else {
            assert!(
                message.error_message.is_empty(),
                "{}",
                message.error_message
            );
            assert_eq!(
                response.raw_output_contents[0],
                fp32_bytes(&[i as f32, 1.0])
            );
        }
        seen.push(i);
    }
    assert_eq!(seen, (0..60).collect::<Vec<_>>());
}

#[tokio::test]
async fn repository_and_unsupported_features() {
    let mut h = start(ControlMode::Explicit).await;
    let index = h
        .client
        .repository_index(RepositoryIndexRequest {
            repository_name: String::new(),
            ready: true,
        })
        .await
        .expect("index");
    let entry = &index.get_ref().models[0];
    assert_eq!(
        (
            entry.name.as_str(),
            entry.version.as_str(),
            entry.state.as_str()
        ),
        ("ident", "1", "READY")
    );

    let unload = RepositoryModelUnloadRequest {
        model_name: "ident".into(),
        ..Default::default()
    };
    h.client
        .repository_model_unload(unload)
        .await
        .expect("unload");
    let ready = h
        .client
        .model_ready(ModelReadyRequest {
            name: "ident".into(),
            version: String::new(),
        })
        .await
        .expect("ready");
    assert!(!ready.get_ref().ready);

    let mut load = RepositoryModelLoadRequest {
        model_name: "ident".into(),
        ..Default::default()
    };
    load.parameters.insert(
        format!("file:1/{MODEL_FILE}"),
        ModelRepositoryParameter {
            parameter_choice: Some(model_repository_parameter::ParameterChoice::BytesParam(
                vec![],
            )),
        },
    );
    let e = h
        .client
        .repository_model_load(load.clone())
        .await
        .expect_err("file override without config");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "failed to load 'ident', failed to poll from model repository: Load parameter 'config' must be specified for model file override"
    );
    load.parameters.clear();
    h.client.repository_model_load(load).await.expect("load");

    let status = h
        .client
        .system_shared_memory_status(SystemSharedMemoryStatusRequest::default())
        .await
        .expect("status")
        .into_inner();
    assert!(status.regions.is_empty());
    let e = h
        .client
        .system_shared_memory_status(SystemSharedMemoryStatusRequest { name: "zz".into() })
        .await
        .expect_err("unknown region");
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(
        e.message(),
        "Unable to find system shared memory region: 'zz'"
    );
    // Tracing is off by default; the settings answer as Triton's.
    let settings = h
        .client
        .trace_setting(TraceSettingRequest::default())
        .await
        .expect("trace settings")
        .into_inner()
        .settings;
    let value = |k: &str| settings.get(k).map(|v| v.value.clone()).unwrap_or_default();
    assert_eq!(value("trace_level"), ["OFF"]);
    assert_eq!(value("trace_rate"), ["1000"]);
    assert_eq!(value("trace_count"), ["-1"]);
    let e = h
        .client
        .trace_setting(TraceSettingRequest {
            model_name: "nosuch".into(),
            ..Default::default()
        })
        .await
        .expect_err("unknown model");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(e.message(), "Request for unknown model : nosuch");
}
