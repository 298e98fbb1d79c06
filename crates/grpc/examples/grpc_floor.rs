//! The floor of Nereid's gRPC stack: tokio, hyper's HTTP/2 and tonic, configured as `nereid`
//! runs them (one I/O worker per two cores, `TCP_NODELAY`, the same flow-control windows),
//! answering `ModelInfer` with fixed bytes — no decode, no core, no encode. Beside Nereid
//! and Triton under the same load it separates what the libraries cost per gRPC call from
//! what Nereid's own request path adds (BENCHMARKS.md §20), as `hyper_floor` does for HTTP.
//!
//! `grpc_floor PORT METADATA CONFIG INFER`: the three files hold the serialized
//! `ModelMetadataResponse`, `ModelConfigResponse` and `ModelInferResponse` a real server
//! gave for the model, so that a load generator sets itself up as against that server.
//! `ModelStatistics` answers the count of `ModelInfer` calls (as success and inferences),
//! the one figure a benchmark reads from the server; every other method is UNIMPLEMENTED.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use nereid_proto::inference::{
    InferStatistics, ModelStatistics, ModelStatisticsResponse, StatisticDuration,
};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: grpc_floor PORT METADATA CONFIG INFER";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port, metadata, config, infer] = args.as_slice() else {
        return Err(usage.into());
    };
    let port: u16 = port.parse()?;
    let answers = Arc::new(Answers {
        metadata: Bytes::from(std::fs::read(metadata)?),
        config: Bytes::from(std::fs::read(config)?),
        infer: Bytes::from(std::fs::read(infer)?),
        calls: AtomicU64::new(0),
    });
    let runtime = nereid_net::io_runtime(nereid_net::default_io_threads())?;
    runtime.block_on(async move {
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(4 * 1024 * 1024))
            .initial_connection_window_size(Some(16 * 1024 * 1024))
            .add_service(FixedInference(answers))
            .serve(([127, 0, 0, 1], port).into())
            .await
    })?;
    Ok(())
}

/// The fixed answers and the count of infer calls answered.
struct Answers {
    metadata: Bytes,
    config: Bytes,
    infer: Bytes,
    calls: AtomicU64,
}

impl Answers {
    /// The serialized answer to `method`, or `None` for a method the floor does not serve.
    fn answer(&self, method: &str) -> Option<Bytes> {
        match method {
            "ModelInfer" => {
                self.calls.fetch_add(1, Ordering::Relaxed);
                Some(self.infer.clone())
            }
            "ModelMetadata" => Some(self.metadata.clone()),
            "ModelConfig" => Some(self.config.clone()),
            "ModelStatistics" => Some(self.statistics()),
            _ => None,
        }
    }

    fn statistics(&self) -> Bytes {
        let calls = self.calls.load(Ordering::Relaxed);
        let success = StatisticDuration {
            count: calls,
            ns: 0,
        };
        let response = ModelStatisticsResponse {
            model_stats: vec![ModelStatistics {
                inference_count: calls,
                execution_count: calls,
                inference_stats: Some(InferStatistics {
                    success: Some(success),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        Bytes::from(response.encode_to_vec())
    }
}

/// `inference.GRPCInferenceService` answered from [`Answers`].
#[derive(Clone)]
struct FixedInference(Arc<Answers>);

impl NamedService for FixedInference {
    const NAME: &'static str = "inference.GRPCInferenceService";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for FixedInference {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let method = request.uri().path().rsplit('/').next().unwrap_or_default();
        let answer = self.0.answer(method);
        Box::pin(async move {
            let mut grpc = Grpc::new(RawCodec);
            Ok(match answer {
                Some(bytes) => grpc.unary(Fixed(bytes), request).await,
                None => Status::unimplemented("not served by the floor").into_http(),
            })
        })
    }
}

/// One unary method's fixed answer.
struct Fixed(Bytes);

impl UnaryService<Bytes> for Fixed {
    type Response = Bytes;
    type Future = std::future::Ready<Result<Response<Bytes>, Status>>;

    fn call(&mut self, _: Request<Bytes>) -> Self::Future {
        std::future::ready(Ok(Response::new(self.0.clone())))
    }
}

/// Messages as bytes both ways: the floor neither parses requests nor builds answers.
#[derive(Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
