//! KServe v2 over gRPC with the messages of `nereid-proto`: unary `ModelInfer` as a
//! pre-encoded frame on a bare HTTP/2 connection, or `ModelStreamInfer` through the
//! generated tonic client with one request in flight per stream; control calls go through
//! the tonic client on a regular `Channel`. Inputs travel as `raw_input_contents`, and no
//! outputs are named, so the server returns all of them raw.

use std::sync::Arc;

use anyhow::Context as _;
use nereid_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use nereid_proto::inference::model_infer_request::InferInputTensor;
use nereid_proto::inference::{
    ModelConfigRequest, ModelInferRequest, ModelMetadataRequest, ModelStatisticsRequest,
    ModelStreamInferResponse, StatisticDuration,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

use super::h2::{grpc_frame, H2Channel, UnaryConn};
use super::{Conn, InferError, InferRequest, Target};
use crate::metadata::{ModelInfo, TensorMeta};
use crate::stats::{Duration64, ServerStats};

/// Opens a tonic channel to `endpoint`, with no message size limits.
async fn open(
    endpoint: &Endpoint,
) -> Result<GrpcInferenceServiceClient<Channel>, tonic::transport::Error> {
    let channel = endpoint.connect().await?;
    Ok(GrpcInferenceServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX))
}

/// The gRPC control client: metadata, config, statistics, and new connections.
pub struct GrpcControl {
    /// On tonic's `Channel`: control calls are rare, and it reconnects by itself.
    client: GrpcInferenceServiceClient<Channel>,
    /// `http://host:port`, the origin of inference requests.
    origin: Uri,
    target: Target,
}

impl GrpcControl {
    /// Connects; a refused connection is an error naming the address.
    pub async fn connect(target: Target) -> anyhow::Result<Self> {
        let origin: Uri = format!("http://{}", target.address)
            .parse()
            .with_context(|| format!("'{}' is not a valid host:port", target.address))?;
        let endpoint = Endpoint::from(origin.clone()).tcp_nodelay(true);
        let client = open(&endpoint).await.map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the gRPC server at {}: connect: {}",
                target.address,
                root_cause(&e)
            )
        })?;
        Ok(Self {
            client,
            origin,
            target,
        })
    }

    /// The factory of inference connections to the same server.
    pub fn connector(&self) -> GrpcConnector {
        GrpcConnector {
            address: self.target.address.as_str().into(),
            origin: self.origin.clone(),
            streaming: self.target.streaming,
        }
    }

    /// Encodes a request: raw contents, every output returned.
    pub fn build(&self, request: &InferRequest) -> GrpcRequest {
        let message = ModelInferRequest {
            model_name: self.target.model.clone(),
            model_version: self.target.version.clone(),
            inputs: request
                .inputs
                .iter()
                .map(|i| InferInputTensor {
                    name: i.name.clone(),
                    datatype: i.datatype.as_str().to_string(),
                    shape: i.shape.clone(),
                    ..Default::default()
                })
                .collect(),
            raw_input_contents: request.inputs.iter().map(|i| i.data.clone()).collect(),
            ..Default::default()
        };
        let frame = grpc_frame(&prost::Message::encode_to_vec(&message));
        GrpcRequest { message, frame }
    }

    /// `ModelMetadata` and `ModelConfig`.
    pub async fn model_info(&mut self) -> anyhow::Result<ModelInfo> {
        let metadata = self
            .client
            .model_metadata(ModelMetadataRequest {
                name: self.target.model.clone(),
                version: self.target.version.clone(),
            })
            .await
            .map_err(|s| anyhow::anyhow!("ModelMetadata: {}", s.message()))?
            .into_inner();
        let config = self
            .client
            .model_config(ModelConfigRequest {
                name: self.target.model.clone(),
                version: self.target.version.clone(),
            })
            .await
            .map_err(|s| anyhow::anyhow!("ModelConfig: {}", s.message()))?
            .into_inner();
        let tensors = |v: Vec<nereid_proto::inference::model_metadata_response::TensorMetadata>| {
            v.into_iter()
                .map(|t| TensorMeta {
                    name: t.name,
                    datatype: t.datatype,
                    shape: t.shape,
                })
                .collect()
        };
        let max_batch_size = config.config.map_or(0, |c| c.max_batch_size);
        Ok(ModelInfo {
            inputs: tensors(metadata.inputs),
            outputs: tensors(metadata.outputs),
            max_batch_size: u32::try_from(max_batch_size).unwrap_or(0),
        })
    }

    /// `ModelStatistics`, summed over the versions it lists.
    pub async fn stats(&mut self) -> anyhow::Result<ServerStats> {
        let response = self
            .client
            .model_statistics(ModelStatisticsRequest {
                name: self.target.model.clone(),
                version: self.target.version.clone(),
            })
            .await
            .map_err(|s| anyhow::anyhow!("ModelStatistics: {}", s.message()))?
            .into_inner();
        let d = |d: Option<StatisticDuration>| {
            let d = d.unwrap_or_default();
            Duration64 {
                count: d.count,
                ns: d.ns,
            }
        };
        let mut total = ServerStats::default();
        for m in response.model_stats {
            let s = m.inference_stats.unwrap_or_default();
            total.add(&ServerStats {
                inference_count: m.inference_count,
                execution_count: m.execution_count,
                success: d(s.success),
                queue: d(s.queue),
                compute_input: d(s.compute_input),
                compute_infer: d(s.compute_infer),
                compute_output: d(s.compute_output),
            });
        }
        Ok(total)
    }
}

/// The innermost cause of an error: tonic's transport error alone says only "transport
/// error", its root cause says "Connection refused (os error 111)".
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// An inference request for gRPC: the message for streams, and the same message framed
/// once for unary calls.
#[derive(Clone, Debug)]
pub struct GrpcRequest {
    /// The request message.
    pub message: ModelInferRequest,
    /// `message` encoded as a gRPC frame.
    pub frame: bytes::Bytes,
}

/// The unary inference method's path.
const MODEL_INFER: &str = "/inference.GRPCInferenceService/ModelInfer";

/// Opens gRPC inference connections, each on its own HTTP/2 connection.
#[derive(Clone)]
pub struct GrpcConnector {
    address: Arc<str>,
    origin: Uri,
    streaming: bool,
}

impl GrpcConnector {
    /// A new inference connection: its own HTTP/2 connection, and its own stream when
    /// streaming.
    pub async fn conn(&self) -> Result<Conn, InferError> {
        Ok(if self.streaming {
            let client = InferClient::open(self.address.clone(), self.origin.clone()).await?;
            Conn::Stream(Box::new(StreamConn {
                client,
                stream: None,
            }))
        } else {
            Conn::Grpc(GrpcConn {
                conn: UnaryConn::connect(&self.address, MODEL_INFER).await?,
            })
        })
    }
}

/// The generated client on one [`H2Channel`] (for streams), reopened after the connection
/// fails.
struct InferClient {
    address: Arc<str>,
    origin: Uri,
    client: GrpcInferenceServiceClient<H2Channel>,
    channel: H2Channel,
}

impl InferClient {
    async fn open(address: Arc<str>, origin: Uri) -> Result<Self, InferError> {
        let channel = H2Channel::connect(&address)
            .await
            .map_err(InferError::Transport)?;
        let client = GrpcInferenceServiceClient::with_origin(channel.clone(), origin.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Self {
            address,
            origin,
            client,
            channel,
        })
    }

    /// The client, reconnected first if the connection is gone.
    async fn get(&mut self) -> Result<&mut GrpcInferenceServiceClient<H2Channel>, InferError> {
        if self.channel.is_closed() {
            *self = Self::open(self.address.clone(), self.origin.clone()).await?;
        }
        Ok(&mut self.client)
    }
}

/// A unary connection.
pub struct GrpcConn {
    conn: UnaryConn,
}

impl GrpcConn {
    /// One `ModelInfer` call.
    pub async fn infer(&mut self, request: &GrpcRequest) -> Result<(), InferError> {
        self.conn.call(&request.frame).await
    }
}

/// Maps a gRPC status to a server error, or a transport error when the call never reached
/// the server.
fn status_error(status: &tonic::Status) -> InferError {
    if status.code() == tonic::Code::Unavailable && status.metadata().is_empty() {
        InferError::Transport(status.message().to_string())
    } else {
        InferError::Server(format!("{:?}: {}", status.code(), status.message()))
    }
}

/// An open `ModelStreamInfer` call: the sender half feeding the request stream and the
/// response stream.
struct OpenStream {
    requests: mpsc::Sender<ModelInferRequest>,
    responses: Streaming<ModelStreamInferResponse>,
}

/// A streaming connection; the stream opens with the first request and reopens after a
/// failure.
pub struct StreamConn {
    client: InferClient,
    /// `None` until the first request and after a broken stream.
    stream: Option<OpenStream>,
}

impl StreamConn {
    /// Sends one request on the stream and waits for its response.
    pub async fn infer(&mut self, request: &GrpcRequest) -> Result<(), InferError> {
        let result = self.exchange(&request.message).await;
        if matches!(result, Err(InferError::Transport(_))) {
            self.stream = None;
        }
        result
    }

    async fn exchange(&mut self, request: &ModelInferRequest) -> Result<(), InferError> {
        let stream = match &mut self.stream {
            Some(stream) => {
                stream
                    .requests
                    .send(request.clone())
                    .await
                    .map_err(|_| InferError::Transport("request stream closed".to_string()))?;
                stream
            }
            None => {
                // Queue the first request before opening the call: a server may hold the
                // response headers until it has seen a message.
                let (tx, rx) = mpsc::channel(1);
                tx.try_send(request.clone())
                    .map_err(|_| InferError::Transport("request stream closed".to_string()))?;
                let responses = self
                    .client
                    .get()
                    .await?
                    .model_stream_infer(ReceiverStream::new(rx))
                    .await
                    .map_err(|s| status_error(&s))?
                    .into_inner();
                self.stream.insert(OpenStream {
                    requests: tx,
                    responses,
                })
            }
        };
        match stream.responses.message().await {
            Ok(Some(response)) if response.error_message.is_empty() => Ok(()),
            Ok(Some(response)) => Err(InferError::Server(response.error_message)),
            Ok(None) => Err(InferError::Transport(
                "the server closed the stream".to_string(),
            )),
            Err(status) => Err(InferError::Transport(format!(
                "stream failed: {:?}: {}",
                status.code(),
                status.message()
            ))),
        }
    }
}
