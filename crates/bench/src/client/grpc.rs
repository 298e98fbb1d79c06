//! KServe v2 over gRPC with the messages of `nereid-proto`: unary `ModelInfer` as a
//! pre-encoded frame on a bare HTTP/2 connection, or `ModelStreamInfer` through the
//! generated tonic client with one request in flight per stream; control calls go through
//! the tonic client on a regular `Channel`. Inputs travel as `raw_input_contents`, and no
//! outputs are named, so the server returns all of them raw.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;
use nereid_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use nereid_proto::inference::infer_parameter::ParameterChoice;
use nereid_proto::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use nereid_proto::inference::{
    InferParameter, ModelConfigRequest, ModelInferRequest, ModelMetadataRequest,
    ModelStatisticsRequest, ModelStreamInferResponse, StatisticDuration,
    SystemSharedMemoryRegisterRequest, SystemSharedMemoryUnregisterRequest,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

use super::h2::{grpc_frame, H2Channel, UnaryConn};
use super::ShmRef;
use super::{Conn, InferError, InferRequest, SequenceStep, Target};
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

    /// Encodes a request: raw contents, every output returned; or, with a shared-memory
    /// placement, no contents and every input and output referring to the region.
    pub fn build(&self, request: &InferRequest) -> GrpcRequest {
        encode(&self.target.model, &self.target.version, request)
    }

    /// `SystemSharedMemoryRegister`.
    pub async fn register_system_shm(
        &mut self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> anyhow::Result<()> {
        self.client
            .system_shared_memory_register(SystemSharedMemoryRegisterRequest {
                name: name.to_string(),
                key: key.to_string(),
                offset,
                byte_size,
            })
            .await
            .map_err(|s| anyhow::anyhow!("SystemSharedMemoryRegister: {}", s.message()))?;
        Ok(())
    }

    /// `SystemSharedMemoryUnregister` of one region.
    pub async fn unregister_system_shm(&mut self, name: &str) -> anyhow::Result<()> {
        self.client
            .system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest {
                name: name.to_string(),
            })
            .await
            .map_err(|s| anyhow::anyhow!("SystemSharedMemoryUnregister: {}", s.message()))?;
        Ok(())
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

/// The request parameters of a sequence step.
fn sequence_parameters(step: SequenceStep) -> HashMap<String, InferParameter> {
    let param = |choice| InferParameter {
        parameter_choice: Some(choice),
    };
    HashMap::from([
        (
            "sequence_id".to_string(),
            param(ParameterChoice::Int64Param(step.id as i64)),
        ),
        (
            "sequence_start".to_string(),
            param(ParameterChoice::BoolParam(step.start)),
        ),
        (
            "sequence_end".to_string(),
            param(ParameterChoice::BoolParam(step.end)),
        ),
    ])
}

/// Encodes a request for `model` (`version`): see [`GrpcControl::build`].
fn encode(model: &str, version: &str, request: &InferRequest) -> GrpcRequest {
    let shm = request.shm.as_ref();
    let message = ModelInferRequest {
        model_name: model.to_string(),
        model_version: version.to_string(),
        inputs: request
            .inputs
            .iter()
            .enumerate()
            .map(|(k, i)| InferInputTensor {
                name: i.name.clone(),
                datatype: i.datatype.as_str().to_string(),
                shape: i.shape.clone(),
                parameters: shm
                    .map(|p| shm_parameters(&p.region, p.inputs[k]))
                    .unwrap_or_default(),
                ..Default::default()
            })
            .collect(),
        // Outputs in shared memory must be named; otherwise none are, and the server
        // returns all of them raw.
        outputs: match shm {
            Some(p) => request
                .outputs
                .iter()
                .zip(&p.outputs)
                .map(|(name, &place)| InferRequestedOutputTensor {
                    name: name.clone(),
                    parameters: shm_parameters(&p.region, place),
                })
                .collect(),
            None => Vec::new(),
        },
        raw_input_contents: match shm {
            Some(_) => Vec::new(),
            None => request.inputs.iter().map(|i| i.data.clone()).collect(),
        },
        parameters: request
            .sequence
            .map(sequence_parameters)
            .unwrap_or_default(),
        ..Default::default()
    };
    let frame = grpc_frame(&prost::Message::encode_to_vec(&message));
    GrpcRequest { message, frame }
}

/// The parameters that place a tensor in a registered shared-memory region.
fn shm_parameters(region: &str, place: ShmRef) -> HashMap<String, InferParameter> {
    let param = |choice| InferParameter {
        parameter_choice: Some(choice),
    };
    let int = |v: u64| {
        param(ParameterChoice::Int64Param(
            i64::try_from(v).unwrap_or(i64::MAX),
        ))
    };
    HashMap::from([
        (
            "shared_memory_region".to_string(),
            param(ParameterChoice::StringParam(region.to_string())),
        ),
        ("shared_memory_offset".to_string(), int(place.offset)),
        ("shared_memory_byte_size".to_string(), int(place.byte_size)),
    ])
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::client::InputTensor;
    use crate::client::ShmPlacement;
    use crate::data::DataType;

    fn request(shm: Option<ShmPlacement>) -> InferRequest {
        InferRequest {
            inputs: vec![InputTensor {
                name: "INPUT0".into(),
                datatype: DataType::Fp32,
                shape: vec![1, 2],
                data: Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8]),
            }],
            outputs: vec!["OUTPUT0".into()],
            shm,
            sequence: Some(SequenceStep {
                id: 9,
                start: false,
                end: true,
            }),
        }
    }

    fn param(p: &HashMap<String, InferParameter>, key: &str) -> ParameterChoice {
        p.get(key)
            .and_then(|p| p.parameter_choice.clone())
            .unwrap_or_else(|| panic!("parameter {key} missing"))
    }

    #[test]
    fn plain_request_carries_raw_contents() {
        let r = encode("m", "1", &request(None));
        assert_eq!(r.message.model_name, "m");
        assert_eq!(r.message.model_version, "1");
        assert_eq!(
            r.message.raw_input_contents,
            vec![vec![1u8, 2, 3, 4, 5, 6, 7, 8]]
        );
        assert!(r.message.inputs[0].parameters.is_empty());
        assert!(r.message.outputs.is_empty());
        assert_eq!(
            param(&r.message.parameters, "sequence_id"),
            ParameterChoice::Int64Param(9)
        );
        assert_eq!(
            param(&r.message.parameters, "sequence_end"),
            ParameterChoice::BoolParam(true)
        );
    }

    #[test]
    fn shm_request_refers_to_the_region_and_carries_no_data() {
        let placement = ShmPlacement {
            region: "nereid_bench_1_0".into(),
            inputs: vec![ShmRef {
                offset: 0,
                byte_size: 8,
            }],
            outputs: vec![ShmRef {
                offset: 64,
                byte_size: 8,
            }],
        };
        let r = encode("m", "", &request(Some(placement)));
        assert!(r.message.raw_input_contents.is_empty());
        let input = &r.message.inputs[0].parameters;
        assert_eq!(
            param(input, "shared_memory_region"),
            ParameterChoice::StringParam("nereid_bench_1_0".into())
        );
        assert_eq!(
            param(input, "shared_memory_offset"),
            ParameterChoice::Int64Param(0)
        );
        assert_eq!(
            param(input, "shared_memory_byte_size"),
            ParameterChoice::Int64Param(8)
        );
        assert_eq!(r.message.outputs.len(), 1);
        let output = &r.message.outputs[0];
        assert_eq!(output.name, "OUTPUT0");
        assert_eq!(
            param(&output.parameters, "shared_memory_offset"),
            ParameterChoice::Int64Param(64)
        );
        // The unary frame is the same message, encoded.
        let decoded: ModelInferRequest =
            prost::Message::decode(&r.frame[5..]).expect("the frame holds the message");
        assert_eq!(decoded, r.message);
    }
}
