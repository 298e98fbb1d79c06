//! The HTTP/2 connection rules and the compression level end to end: the service on
//! `127.0.0.1:0`, a raw `h2` client for the pings and GOAWAYs, the generated client for
//! calls.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nereid_core::testing::{self, fp32_bytes, TestBackend};
use nereid_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use nereid_proto::inference::model_infer_request::InferInputTensor;
use nereid_proto::inference::{ModelInferRequest, ServerLiveRequest};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;

use crate::{CompressionLevel, GrpcOptions, Http2Policy};

const CONFIG: &str = r#"backend: "identity" max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]"#;

/// A served port; dropping it stops the service.
struct Served {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
    _repo: tempfile::TempDir,
}

async fn serve(options: GrpcOptions, backend: TestBackend) -> Served {
    let repo = tempfile::tempdir().expect("temp dir");
    testing::write_model(repo.path(), "ident", CONFIG, &[1]);
    let server = testing::server(repo.path(), &backend).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("bound address");
    let (stop, stopped) = oneshot::channel::<()>();
    let stopped = async {
        let _ = stopped.await;
    };
    tokio::spawn(crate::serve_with(server, listener, stopped, options));
    Served {
        addr,
        _stop: stop,
        _repo: repo,
    }
}

async fn client(addr: SocketAddr) -> GrpcInferenceServiceClient<Channel> {
    GrpcInferenceServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

fn infer_request() -> ModelInferRequest {
    ModelInferRequest {
        model_name: "ident".into(),
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

/// A raw HTTP/2 client connection: its PING handle, and its connection's end.
async fn h2_connect(
    addr: SocketAddr,
) -> (
    h2::PingPong,
    oneshot::Receiver<Result<(), h2::Error>>,
    h2::client::SendRequest<bytes::Bytes>,
) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, mut connection) = h2::client::handshake(tcp).await.expect("handshake");
    let pings = connection.ping_pong().expect("ping handle");
    let (ended, end) = oneshot::channel();
    tokio::spawn(async move {
        let _ = ended.send(connection.await);
    });
    (pings, end, send)
}

#[tokio::test]
async fn pings_too_fast_end_in_goaway_enhance_your_calm_too_many_pings() {
    let served = serve(GrpcOptions::default(), TestBackend::identity()).await;
    let (mut pings, end, _send) = h2_connect(served.addr).await;
    // No call in flight: one ping in two hours is allowed; the third strike is out.
    for _ in 0..3 {
        pings
            .ping(h2::Ping::opaque())
            .await
            .expect("pings within the strikes are answered");
    }
    let _ = pings.ping(h2::Ping::opaque()).await;
    let ended = tokio::time::timeout(Duration::from_secs(10), end)
        .await
        .expect("the server closes the connection")
        .expect("connection task");
    let error = ended.expect_err("closed by a GOAWAY");
    assert!(error.is_go_away() && error.is_remote(), "{error}");
    assert_eq!(error.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM));
    assert!(error.to_string().contains("too_many_pings"), "{error}");
}

#[tokio::test]
async fn unlimited_strikes_never_close_the_connection() {
    let options = GrpcOptions {
        http2: Http2Policy {
            max_ping_strikes: 0,
            ..Http2Policy::default()
        },
        ..GrpcOptions::default()
    };
    let served = serve(options, TestBackend::identity()).await;
    let (mut pings, mut end, _send) = h2_connect(served.addr).await;
    for _ in 0..20 {
        pings.ping(h2::Ping::opaque()).await.expect("answered");
    }
    assert!(end.try_recv().is_err(), "the connection is still open");
}

#[tokio::test]
async fn the_level_picks_the_algorithm_for_inference_calls_only() {
    for (level, expected) in [
        (CompressionLevel::Low, Some("gzip")),
        (CompressionLevel::Medium, Some("deflate")),
        (CompressionLevel::High, Some("deflate")),
        (CompressionLevel::None, None),
    ] {
        let options = GrpcOptions {
            compression_level: level,
            ..GrpcOptions::default()
        };
        let served = serve(options, TestBackend::identity()).await;
        let mut client = client(served.addr)
            .await
            .accept_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Deflate);
        let response = client.model_infer(infer_request()).await.expect("infer");
        let encoding = response.metadata().get("grpc-encoding");
        assert_eq!(
            encoding.and_then(|e| e.to_str().ok()),
            expected,
            "{level:?}"
        );
        assert_eq!(response.into_inner().raw_output_contents.len(), 1);
        let live = client
            .server_live(ServerLiveRequest {})
            .await
            .expect("live");
        assert!(
            live.metadata().get("grpc-encoding").is_none(),
            "{level:?}: Triton compresses only inference responses"
        );
    }
}

#[tokio::test]
async fn a_client_accepting_no_algorithm_gets_plain_responses() {
    let options = GrpcOptions {
        compression_level: CompressionLevel::High,
        ..GrpcOptions::default()
    };
    let served = serve(options, TestBackend::identity()).await;
    let mut client = client(served.addr).await;
    let response = client.model_infer(infer_request()).await.expect("infer");
    assert!(response.metadata().get("grpc-encoding").is_none());
}

#[tokio::test]
async fn at_its_age_a_connection_goes_away_and_after_the_grace_it_closes() {
    let age = Duration::from_millis(300);
    let options = GrpcOptions {
        http2: Http2Policy {
            max_connection_age: Some(age),
            max_connection_age_grace: Some(Duration::from_millis(300)),
            ..Http2Policy::default()
        },
        ..GrpcOptions::default()
    };
    let backend = TestBackend::identity().with_delay(Duration::from_secs(5));
    let served = serve(options, backend).await;
    // An idle connection: a graceful GOAWAY, then the connection ends cleanly.
    let (_pings, end, _send) = h2_connect(served.addr).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), end)
        .await
        .expect("the server ends the connection")
        .expect("connection task");
    assert!(ended.is_ok(), "{ended:?}");
    // A call that outlives the grace is cut off with its connection.
    let mut client = client(served.addr).await;
    let start = Instant::now();
    let status = client
        .model_infer(infer_request())
        .await
        .expect_err("the connection closes under the call");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "closed at age + grace, not after the 5s call: {:?} ({status})",
        start.elapsed()
    );
}

/// The frames a raw HTTP/2 client at `addr` reads, as (type, payload), from its preface
/// until the server closes the connection.
async fn frames_until_close(addr: SocketAddr) -> Vec<(u8, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("preface and SETTINGS");
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut bytes))
        .await
        .expect("the server closes the connection")
        .expect("read until the close");
    let mut frames = Vec::new();
    let mut rest = &bytes[..];
    while rest.len() >= 9 {
        let length = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        let payload = rest.get(9..9 + length).expect("whole frames").to_vec();
        frames.push((rest[3], payload));
        rest = &rest[9 + length..];
    }
    frames
}

#[tokio::test]
async fn an_idle_connection_gets_a_goaway_before_it_is_closed() {
    let mut options = GrpcOptions::default();
    options.limits.idle_timeout = Some(Duration::from_millis(300));
    let served = serve(options, TestBackend::identity()).await;
    let start = Instant::now();
    let frames = frames_until_close(served.addr).await;
    assert!(start.elapsed() >= Duration::from_millis(300));
    let goaways: Vec<_> = frames.iter().filter(|(kind, _)| *kind == 0x7).collect();
    assert_eq!(goaways.len(), 1, "one GOAWAY before the close: {frames:?}");
    let payload = &goaways[0].1;
    // No stream was opened; NO_ERROR.
    assert_eq!(payload[..8], [0, 0, 0, 0, 0, 0, 0, 0], "{payload:?}");
    assert_eq!(&payload[8..], b"idle_timeout");
    assert_eq!(
        frames.last().map(|f| f.0),
        Some(0x7),
        "the GOAWAY is the last frame"
    );
}

#[tokio::test]
async fn a_call_past_its_grpc_timeout_ends_with_deadline_exceeded() {
    // A raw call, so that only the server's timer can end it (tonic's client enforces the
    // header too): gRPC's DEADLINE_EXCEEDED, not tonic's CANCELLED "Timeout expired".
    use prost::Message;
    let backend = TestBackend::identity().with_delay(Duration::from_secs(5));
    let served = serve(GrpcOptions::default(), backend).await;
    let (_pings, _end, send) = h2_connect(served.addr).await;
    let mut send = send.ready().await.expect("ready");
    let request = tonic::codegen::http::Request::post("/inference.GRPCInferenceService/ModelInfer")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "200m")
        .body(())
        .expect("request");
    let (response, mut body) = send.send_request(request, false).expect("sent");
    let message = infer_request().encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    body.send_data(frame.into(), true).expect("message sent");
    let started = Instant::now();
    let response = response.await.expect("answered");
    // A trailers-only answer: the status is in the headers, its message percent-encoded.
    let status = response.headers().get("grpc-status").cloned();
    assert_eq!(
        status.as_ref().map(|v| v.as_bytes()),
        Some(&b"4"[..]),
        "{response:?}"
    );
    let message = response.headers().get("grpc-message").cloned();
    assert_eq!(
        message.as_ref().map(|v| v.as_bytes()),
        Some(&b"Deadline%20Exceeded"[..])
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "ended at the deadline"
    );
}
