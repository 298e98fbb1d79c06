//! Talking to the server: a control client for metadata, config and statistics, and
//! per-worker connections that send inference requests.
//!
//! A [`Conn`] carries at most one request at a time (an HTTP/1.1 keep-alive connection, a
//! gRPC channel, or a gRPC stream), so closed-loop workers each own one and the open loop
//! keeps a pool of them. Requests are encoded for the wire once, up front
//! ([`Client::encode`]), so the hot path only clones reference-counted buffers.

pub mod grpc;
pub mod h2;
pub mod http;
mod placement;

pub use placement::{ShmPlacement, ShmRef};

use bytes::Bytes;

use crate::cli::Protocol;
use crate::data::DataType;
use crate::metadata::ModelInfo;
use crate::stats::ServerStats;

/// Where and how to send requests.
#[derive(Clone, Debug)]
pub struct Target {
    /// Protocol.
    pub protocol: Protocol,
    /// Use gRPC streaming for inference.
    pub streaming: bool,
    /// Server address, host:port.
    pub address: String,
    /// Model name.
    pub model: String,
    /// Model version, empty for the server's choice.
    pub version: String,
}

/// One input tensor of a request, protocol-neutral.
#[derive(Clone, Debug)]
pub struct InputTensor {
    /// Input name.
    pub name: String,
    /// Datatype.
    pub datatype: DataType,
    /// Full shape.
    pub shape: Vec<i64>,
    /// Raw little-endian contents (BYTES length-prefixed).
    pub data: Bytes,
}

/// An inference request, protocol-neutral; [`Client::encode`] turns it into a [`WireRequest`].
#[derive(Clone, Debug)]
pub struct InferRequest {
    /// Inputs.
    pub inputs: Vec<InputTensor>,
    /// Outputs to ask for (all of the model's, as binary data).
    pub outputs: Vec<String>,
    /// With `--shared-memory system`: where the inputs are and where the outputs go; the
    /// encoded request then carries no tensor data.
    pub shm: Option<ShmPlacement>,
    /// In sequence mode: the request's correlation ID and flags.
    pub sequence: Option<SequenceStep>,
}

/// A request's place in a sequence (`sequence_id`, `sequence_start`, `sequence_end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceStep {
    /// Correlation ID.
    pub id: u64,
    /// First request.
    pub start: bool,
    /// Last request.
    pub end: bool,
}

/// A request encoded for one protocol.
#[derive(Clone, Debug)]
pub enum WireRequest {
    /// HTTP: the body and its JSON header length.
    Http(http::HttpBody),
    /// gRPC, unary or streaming.
    Grpc(grpc::GrpcRequest),
}

/// Why a request did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum InferError {
    /// The server answered with an error (HTTP status other than 200, gRPC status, or an
    /// in-stream `error_message`).
    #[error("server error: {0}")]
    Server(String),
    /// The connection failed; the next request reconnects.
    #[error("connection error: {0}")]
    Transport(String),
}

/// The control client: one connection for metadata, config and statistics, which also
/// hands out the [`Connector`] for inference connections.
pub enum Client {
    /// Over HTTP.
    Http(http::HttpControl),
    /// Over gRPC.
    Grpc(grpc::GrpcControl),
}

impl Client {
    /// Connects to the server. Fails with a readable message if nothing answers there.
    pub async fn connect(target: Target) -> anyhow::Result<Self> {
        Ok(match target.protocol {
            Protocol::Http => Self::Http(http::HttpControl::connect(target).await?),
            Protocol::Grpc => Self::Grpc(grpc::GrpcControl::connect(target).await?),
        })
    }

    /// The model's metadata and `max_batch_size`.
    pub async fn model_info(&mut self) -> anyhow::Result<ModelInfo> {
        match self {
            Self::Http(c) => c.model_info().await,
            Self::Grpc(c) => c.model_info().await,
        }
    }

    /// The model's cumulative statistics (statistics extension).
    pub async fn stats(&mut self) -> anyhow::Result<ServerStats> {
        match self {
            Self::Http(c) => c.stats().await,
            Self::Grpc(c) => c.stats().await,
        }
    }

    /// Registers the system shared-memory object `key` (`offset`, `byte_size`) as region
    /// `name`.
    pub async fn register_system_shm(
        &mut self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> anyhow::Result<()> {
        match self {
            Self::Http(c) => c.register_system_shm(name, key, offset, byte_size).await,
            Self::Grpc(c) => c.register_system_shm(name, key, offset, byte_size).await,
        }
    }

    /// Unregisters the system shared-memory region `name`.
    pub async fn unregister_system_shm(&mut self, name: &str) -> anyhow::Result<()> {
        match self {
            Self::Http(c) => c.unregister_system_shm(name).await,
            Self::Grpc(c) => c.unregister_system_shm(name).await,
        }
    }

    /// Encodes a request for this client's protocol.
    pub fn encode(&self, request: &InferRequest) -> WireRequest {
        match self {
            Self::Http(_) => WireRequest::Http(http::HttpBody::build(request)),
            Self::Grpc(c) => WireRequest::Grpc(c.build(request)),
        }
    }

    /// The factory of inference connections to the same server and model.
    pub fn connector(&self) -> Connector {
        match self {
            Self::Http(c) => Connector::Http(c.connector()),
            Self::Grpc(c) => Connector::Grpc(c.connector()),
        }
    }
}

/// Opens inference connections; cheap to clone into every task that needs one.
#[derive(Clone)]
pub enum Connector {
    /// HTTP connections.
    Http(http::HttpConnector),
    /// gRPC channels (unary or streaming).
    Grpc(grpc::GrpcConnector),
}

impl Connector {
    /// Opens a new inference connection.
    pub async fn conn(&self) -> Result<Conn, InferError> {
        Ok(match self {
            Self::Http(c) => Conn::Http(c.conn().await?),
            Self::Grpc(c) => c.conn().await?,
        })
    }
}

/// An inference connection that carries one request at a time.
pub enum Conn {
    /// HTTP/1.1 keep-alive connection.
    Http(http::HttpConn),
    /// gRPC channel, unary `ModelInfer`.
    Grpc(grpc::GrpcConn),
    /// gRPC `ModelStreamInfer` stream (boxed: it holds a whole response decoder).
    Stream(Box<grpc::StreamConn>),
}

impl Conn {
    /// Sends one request and waits for its full response.
    pub async fn infer(&mut self, request: &WireRequest) -> Result<(), InferError> {
        match (self, request) {
            (Self::Http(c), WireRequest::Http(body)) => c.infer(body).await,
            (Self::Grpc(c), WireRequest::Grpc(req)) => c.infer(req).await,
            (Self::Stream(c), WireRequest::Grpc(req)) => c.infer(req).await,
            _ => Err(InferError::Transport(
                "request encoded for another protocol".to_string(),
            )),
        }
    }
}
