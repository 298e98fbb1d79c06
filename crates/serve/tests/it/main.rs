//! `nereid-embed` and `nereid-serve` end to end: a [`Nereid`] started on a tiny repository (the shared test
//! backend), served on port-0 listeners, spoken to over real sockets, and shut down
//! through the shutdown future.

use std::net::SocketAddr;
use std::sync::Arc;

use nereid_core::testing::{self, TestBackend, BACKEND_NAME};
use nereid_embed::{Nereid, Options};
use nereid_serve::{serve, FrontendOptions, Listeners};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod endpoints;

const CONFIG: &str = r#"backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]"#;

/// Options for a repository at `root` whose models run on `backend`.
fn options(root: &std::path::Path, backend: &TestBackend) -> Options {
    let mut options = Options {
        model_repositories: vec![root.to_path_buf()],
        ..Options::default()
    };
    options
        .extra_backends
        .insert(BACKEND_NAME, Arc::new(backend.clone()));
    options
}

/// One HTTP/1.1 exchange on a fresh connection: (status, body).
async fn http(address: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("receive");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.expect("bind")
}

#[tokio::test]
async fn serves_http_until_the_shutdown_future_resolves() {
    let repo = tempfile::tempdir().expect("temp dir");
    testing::write_model(repo.path(), "ident", CONFIG, &[1]);
    let backend = TestBackend::identity();
    let nereid = Nereid::start(options(repo.path(), &backend))
        .await
        .expect("starts");
    let (http_listener, metrics_listener) = (bind().await, bind().await);
    let address = http_listener.local_addr().expect("bound");
    let metrics_address = metrics_listener.local_addr().expect("bound");
    let listeners = Listeners {
        http: Some(http_listener),
        grpc: Some(bind().await),
        metrics: Some(metrics_listener),
        ..Listeners::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let client = async {
        assert_eq!(http(address, "GET", "/v2/health/live", "").await.0, 200);
        assert_eq!(http(address, "GET", "/v2/health/ready", "").await.0, 200);
        let (status, body) = http(
            address,
            "POST",
            "/v2/models/ident/infer",
            r#"{"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1.5, 2.5]}]}"#,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""data":[1.5,2.5]"#), "{body}");
        let (status, metrics) = http(metrics_address, "GET", "/metrics", "").await;
        assert_eq!(status, 200);
        assert!(
            metrics.contains("nv_inference_request_success"),
            "{metrics}"
        );
        let _ = stop.send(());
    };
    let shutdown = async {
        let _ = stopped.await;
    };
    let (served, ()) = tokio::join!(
        serve(&nereid, listeners, FrontendOptions::default(), shutdown),
        client
    );
    served.expect("serves");
    assert!(!nereid.server().is_ready(), "stopping turns readiness off");
    assert!(
        TcpStream::connect(address).await.is_err(),
        "the listener is closed"
    );
    nereid.shutdown().await;
}

#[tokio::test]
async fn a_model_that_fails_to_load_fails_start_up() {
    let repo = tempfile::tempdir().expect("temp dir");
    testing::write_model(repo.path(), "broken", "this is not a config", &[1]);
    let backend = TestBackend::identity();
    let error = Nereid::start(options(repo.path(), &backend))
        .await
        .err()
        .expect("exit on error");
    assert_eq!(error.kind(), nereid_core::ErrorKind::Internal);
    assert!(
        error
            .message()
            .starts_with("failed to load all models (1 failed"),
        "{error}"
    );
    let serving = Nereid::start(Options {
        exit_on_error: false,
        ..options(repo.path(), &backend)
    })
    .await
    .expect("serves what loaded");
    assert!(!serving.server().model_ready("broken", None));
    serving.shutdown().await;
}

#[tokio::test]
async fn the_cache_store_answers_repeated_requests() {
    use nereid_core::cache::local::LocalCache;
    use nereid_core::cache::CacheConfig;

    let repo = tempfile::tempdir().expect("temp dir");
    let config = format!("{CONFIG}\nresponse_cache {{ enable: true }}");
    testing::write_model(repo.path(), "ident", &config, &[1]);
    let backend = TestBackend::identity();
    let cache = CacheConfig::from_flags(&["local,size=1048576".to_string()], None)
        .expect("valid flags")
        .expect("a cache");
    let store = LocalCache::from_config(&cache).expect("local store");
    let nereid = Nereid::start(Options {
        cache: Some(Arc::new(store)),
        ..options(repo.path(), &backend)
    })
    .await
    .expect("starts");
    for _ in 0..2 {
        let input = testing::fp32_input("INPUT0", &[2], &[1.0, 2.0]);
        nereid
            .server()
            .infer(testing::request("ident", "", vec![input]))
            .await
            .expect("infers");
    }
    assert_eq!(
        backend.executions().len(),
        1,
        "the second came from the cache"
    );
    nereid.shutdown().await;
}
