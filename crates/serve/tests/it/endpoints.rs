//! The SageMaker and Vertex AI ports served beside the others: each answers on its own
//! socket, Vertex AI's `metrics` redirect shows the metrics port's text, both close at
//! shutdown, and a Vertex AI endpoint that cannot start fails `serve` before anything
//! is served, in tritonserver's words.

use nereid_core::testing::{self, TestBackend};
use nereid_embed::Nereid;
use nereid_http::vertex_ai::VertexAiOptions;
use nereid_serve::{serve, FrontendOptions, Listeners};
use tokio::net::TcpStream;

use super::{bind, http, options, CONFIG};

const JSON: &str =
    r#"{"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.5, 2.5]}]}"#;

fn vertex_routes() -> VertexAiOptions {
    VertexAiOptions {
        predict_route: Some("/predict".into()),
        health_route: Some("/health".into()),
        ..VertexAiOptions::default()
    }
}

/// A server over a repository holding `ident`, and the repository.
async fn started() -> (tempfile::TempDir, Nereid) {
    let repo = tempfile::tempdir().expect("temp dir");
    testing::write_model(repo.path(), "ident", CONFIG, &[1]);
    let nereid = Nereid::start(options(repo.path(), &TestBackend::identity()))
        .await
        .expect("starts");
    (repo, nereid)
}

#[tokio::test]
async fn sagemaker_and_vertex_ai_serve_until_shutdown() {
    let (_repo, nereid) = started().await;
    let (sagemaker, vertex_ai) = (bind().await, bind().await);
    let sagemaker_address = sagemaker.local_addr().expect("bound");
    let vertex_address = vertex_ai.local_addr().expect("bound");
    let listeners = Listeners {
        sagemaker: Some(sagemaker),
        vertex_ai: Some(vertex_ai),
        metrics: Some(bind().await),
        ..Listeners::default()
    };
    let frontends = FrontendOptions {
        vertex_ai: vertex_routes(),
        ..FrontendOptions::default()
    };
    let client = async {
        assert_eq!(http(sagemaker_address, "GET", "/ping", "").await.0, 200);
        let (status, body) = http(sagemaker_address, "POST", "/invocations", JSON).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""data":[1.5,2.5]"#), "{body}");
        assert_eq!(http(vertex_address, "GET", "/health", "").await.0, 200);
        let (status, body) = http(vertex_address, "POST", "/predict", JSON).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""model_name":"ident""#), "{body}");
        let mut stream = TcpStream::connect(vertex_address).await.expect("connect");
        let request = "POST /predict HTTP/1.1\r\nHost: test\r\nConnection: close\r\nX-Vertex-Ai-Triton-Redirect: metrics\r\nContent-Length: 0\r\n\r\n";
        tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes())
            .await
            .expect("send");
        let mut metrics = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut metrics)
            .await
            .expect("receive");
        assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
        assert!(
            metrics.contains(r#"nv_inference_request_success{model="ident",version="1"} 2"#),
            "{metrics}"
        );
        assert!(metrics.contains("nv_cpu_utilization"), "{metrics}");
    };
    serve_while(&nereid, listeners, frontends, client).await;
    let closed = [sagemaker_address, vertex_address].map(TcpStream::connect);
    for connect in closed {
        assert!(connect.await.is_err(), "the listeners are closed");
    }
    nereid.shutdown().await;
}

/// Serves `listeners` while `client` runs, then shuts the serving down.
async fn serve_while(
    nereid: &Nereid,
    listeners: Listeners,
    frontends: FrontendOptions,
    client: impl std::future::Future<Output = ()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let client = async {
        client.await;
        let _ = stop.send(());
    };
    let shutdown = async {
        let _ = stopped.await;
    };
    let (served, ()) = tokio::join!(serve(nereid, listeners, frontends, shutdown), client);
    served.expect("serves");
}

#[tokio::test]
async fn a_vertex_ai_endpoint_without_its_routes_fails_serve() {
    let (_repo, nereid) = started().await;
    let http_listener = bind().await;
    let http_address = http_listener.local_addr().expect("bound");
    let listeners = Listeners {
        http: Some(http_listener),
        vertex_ai: Some(bind().await),
        ..Listeners::default()
    };
    let error = serve(&nereid, listeners, FrontendOptions::default(), async {})
        .await
        .expect_err("no routes");
    assert_eq!(
        error.message(),
        "failed to start Vertex AI service: Invalid argument - API_PREDICT_ROUTE is not defined for Vertex AI endpoint"
    );
    assert!(
        TcpStream::connect(http_address).await.is_err(),
        "nothing was served"
    );
    nereid.shutdown().await;
}
