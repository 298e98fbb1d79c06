//! Nereid's gRPC frontend: Triton's `inference.GRPCInferenceService` (KServe v2 plus
//! Triton's extensions) and `grpc.health.v1.Health/Check`, on tonic.
//!
//! The frontend is a thin adapter: decode the wire message, make one call on the core
//! [`Server`] facade, encode the result (errors through [`status::to_status`]).
//!
//! - [`convert`]: infer request/response conversion and parameter checks.
//! - [`contents`]: typed tensor `contents` → little-endian bytes.
//! - [`admin`]: metadata, configuration, statistics, repository.
//! - [`shm`]: the system and CUDA shared-memory RPCs.
//! - [`trace`]: the trace extension's `TraceSetting`.
//! - [`stream`]: the bidirectional `ModelStreamInfer`.
//! - [`forward`]: `--grpc-header-forward-pattern`, metadata as request parameters.
//! - [`limits`]: the connection cap and idle timer on tonic's server.
//! - [`tls`]: TLS and mutual TLS, the handshake in the accept path.
//! - [`policy`], [`watch`], [`frames`]: gRPC core's HTTP/2 rules (ping abuse, keep-alive,
//!   connection age) on the connection's frames.
//! - [`compression`]: the response compression level of the inference calls.
//! - [`restrict`]: `--grpc-restricted-protocol`, refusing calls to restricted groups.
//! - [`deadline`]: a call's `grpc-timeout`, ended with DEADLINE_EXCEEDED as gRPC does.
//! - [`response_delay`]: Triton's test hook delaying non-inference answers.
//! - [`infer_delays`]: Triton's test hooks delaying a `ModelInfer` answer.
//! - [`status`]: core error → gRPC status.

pub mod admin;
pub mod compression;
pub mod contents;
pub mod convert;
pub mod deadline;
pub mod forward;
pub mod frames;
pub mod infer_delays;
pub mod limits;
pub mod logging;
pub mod message_limits;
pub mod policy;
pub mod response_delay;
pub mod restrict;
pub mod shm;
pub mod status;
pub mod stream;
pub mod tls;
pub mod trace;
pub mod watch;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_core::header_forward::HeaderForward;
use nereid_core::request::{id_for_log, log_refused};
use nereid_core::restricted::Restrictions;
use nereid_core::shm::RegionKind;
use nereid_core::Server;
use nereid_net::{Acceptor, Limits};
use nereid_proto::health::health_check_response::ServingStatus;
use nereid_proto::health::health_server::{Health, HealthServer};
use nereid_proto::health::{HealthCheckRequest, HealthCheckResponse};
use nereid_proto::inference::grpc_inference_service_server::{
    GrpcInferenceService, GrpcInferenceServiceServer,
};
use nereid_proto::inference::*;
use tokio::net::TcpListener;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status, Streaming};

use crate::status::to_status;
pub use compression::CompressionLevel;
pub use message_limits::MessageLimits;
pub use policy::Http2Policy;
pub use restrict::RESTRICTED_HEADER_PREFIX;
pub use tls::{ServerTls, TlsError, TlsFiles};

/// HTTP/2 flow-control windows, fixed and large enough that a client streams a large
/// tensor without waiting for window updates. Fixed rather than adaptive: the adaptive
/// window pings the client on every data frame to estimate bandwidth, which cost an
/// extra frame and wake-up per request on small requests (BENCHMARKS.md).
const STREAM_WINDOW: u32 = 4 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;

/// Frontend settings beyond the listener.
#[derive(Debug, Clone)]
pub struct GrpcOptions {
    /// How `ModelInfer` and `ModelStreamInfer` responses are compressed
    /// (`--grpc-infer-response-compression-level`; see [`compression`]). Off by default,
    /// as in Triton. Compressed *requests* are always accepted.
    pub compression_level: CompressionLevel,
    /// Largest request message as it arrives (`--grpc-max-input-size`) and once inflated
    /// (`--grpc-max-decompressed-size`); a larger one fails with RESOURCE_EXHAUSTED before
    /// it is buffered or inflated whole.
    pub message_limits: MessageLimits,
    /// Connection cap, idle and write timeouts for the port. Its header timeout does not
    /// apply (HTTP/2 frames its headers: a connection stuck in one is idle); its body
    /// timeout bounds the pauses within a unary call's request message (a stream's
    /// requests may come as slowly as the client likes).
    pub limits: Limits,
    /// Keep-alive, ping-abuse and connection-age rules (`--grpc-keepalive-*`,
    /// `--grpc-http2-*`, `--grpc-max-connection-age*`), gRPC core's defaults unless set.
    pub http2: Http2Policy,
    /// TLS (`--grpc-use-ssl`, `--grpc-use-ssl-mutual`), loaded at start-up.
    pub tls: Option<ServerTls>,
    /// API groups that answer only calls carrying their metadata
    /// (`--grpc-restricted-protocol`).
    pub restrictions: Arc<Restrictions>,
    /// Metadata to forward to the model as request parameters on `ModelInfer` and
    /// `ModelStreamInfer` (`--grpc-header-forward-pattern`).
    pub header_forward: Option<Arc<HeaderForward>>,
    /// How long every non-inference answer waits before it is written
    /// (`TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC`, Triton's test hook); `None`: no wait.
    pub response_delay: Option<Duration>,
    /// Triton's test hooks holding a `ModelInfer` answer (see [`infer_delays`]).
    pub infer_delays: infer_delays::InferDelays,
    /// Most responses of one decoupled request waiting to be written
    /// (`--grpc-max-response-pool-size`); its backend waits while they are this many.
    /// Triton's default is unbounded; Nereid's holds
    /// [`nereid_core::response_stream::RESPONSES_BUFFERED`].
    pub response_pool_size: usize,
}

impl Default for GrpcOptions {
    /// Triton's defaults, with the input size and connection limits of [`Limits`].
    fn default() -> Self {
        Self {
            compression_level: CompressionLevel::None,
            message_limits: MessageLimits::default(),
            limits: Limits::default(),
            http2: Http2Policy::default(),
            tls: None,
            restrictions: Arc::default(),
            header_forward: None,
            response_delay: None,
            infer_delays: infer_delays::InferDelays::default(),
            response_pool_size: nereid_core::response_stream::RESPONSES_BUFFERED,
        }
    }
}

/// Serves gRPC on `listener` until `shutdown` resolves.
pub async fn serve(
    server: Arc<Server>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    serve_with(server, listener, shutdown, GrpcOptions::default()).await
}

/// [`serve`] with explicit [`GrpcOptions`].
pub async fn serve_with(
    server: Arc<Server>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    options: GrpcOptions,
) -> Result<(), tonic::transport::Error> {
    let level = options.compression_level;
    let inference_limited = |limit: usize| {
        let service = GrpcInferenceServiceServer::new(InferenceService {
            server: server.clone(),
            header_forward: options.header_forward.clone(),
            infer_delays: options.infer_delays,
            response_pool_size: options.response_pool_size,
        })
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(usize::MAX);
        if level == CompressionLevel::None {
            service
        } else {
            // The layer below leaves each inference call one encoding to choose.
            service
                .send_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Deflate)
        }
    };
    let sizes = options.message_limits;
    let inference = message_limits::ByEncoding {
        plain: inference_limited(sizes.max_input),
        compressed: inference_limited(sizes.compressed()),
    };
    // Health checks are a few bytes: the smaller limit serves both kinds.
    let health = HealthServer::new(HealthService {
        server: server.clone(),
    })
    .accept_compressed(CompressionEncoding::Gzip)
    .accept_compressed(CompressionEncoding::Deflate)
    .max_decoding_message_size(sizes.compressed());
    // The acceptor sets TCP_NODELAY (tonic sets it only on listeners it binds itself).
    // Header and body timers are HTTP/1 matters; the idle timer covers an HTTP/2
    // connection that never completes a call's headers.
    let limits = Limits {
        header_timeout: None,
        body_timeout: None,
        ..options.limits
    };
    let http2 = options.http2;
    let acceptor = Acceptor::new(listener, "gRPC", limits);
    let incoming = limits::incoming(acceptor, options.tls.as_ref(), http2);
    let mut builder = tonic::transport::Server::builder()
        .initial_stream_window_size(Some(STREAM_WINDOW))
        .initial_connection_window_size(Some(CONNECTION_WINDOW));
    // The GOAWAY at the age is hyper's graceful shutdown; the close after the grace is
    // the connection policy's (tonic's own grace skips the GOAWAY).
    if let Some(age) = http2.max_connection_age {
        builder = builder.max_connection_age(age);
    }
    // Keep-alive PINGs are the connection policy's (see `watch`), not hyper's.
    // Inside tonic's own `grpc-timeout` timer, which it must beat (see `deadline`).
    builder
        .layer(deadline::DeadlineLayer)
        .layer(limits::TrackCallsLayer {
            unary_body_timeout: options.limits.body_timeout,
        })
        .layer(response_delay::ResponseDelayLayer(options.response_delay))
        .layer(restrict::RestrictLayer(options.restrictions))
        .layer(tower::util::option_layer(
            (level != CompressionLevel::None).then_some(compression::LevelLayer(level)),
        ))
        .add_service(inference)
        .add_service(health)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// `inference.GRPCInferenceService` over the core facade.
pub struct InferenceService {
    /// The core; shared with the other frontend.
    pub server: Arc<Server>,
    /// `--grpc-header-forward-pattern`, when given.
    pub header_forward: Option<Arc<HeaderForward>>,
    /// Triton's test hooks holding a `ModelInfer` answer.
    pub infer_delays: infer_delays::InferDelays,
    /// `--grpc-max-response-pool-size`: see [`GrpcOptions::response_pool_size`].
    pub response_pool_size: usize,
}

fn reply<T>(result: nereid_core::Result<T>) -> Result<Response<T>, Status> {
    result.map(Response::new).map_err(to_status)
}

#[tonic::async_trait]
impl GrpcInferenceService for InferenceService {
    async fn server_live(
        &self,
        _request: Request<ServerLiveRequest>,
    ) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse {
            live: self.server.is_live(),
        }))
    }

    async fn server_ready(
        &self,
        _request: Request<ServerReadyRequest>,
    ) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse {
            ready: self.server.is_ready(),
        }))
    }

    async fn model_ready(
        &self,
        request: Request<ModelReadyRequest>,
    ) -> Result<Response<ModelReadyResponse>, Status> {
        reply(admin::model_ready(&self.server, request.get_ref()))
    }

    async fn server_metadata(
        &self,
        _request: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(admin::server_metadata(&self.server)))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        reply(admin::model_metadata(&self.server, request.get_ref()))
    }

    async fn model_infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let forwarded = forward::forwarded(self.header_forward.as_deref(), request.metadata());
        let (metadata, _, request) = request.into_parts();
        // tonic hands over the message already read: both read timestamps are now.
        let trace = self
            .server
            .trace()
            .sample_propagated(&request.model_name, &|name| {
                trace::metadata_text(&metadata, name)
            });
        if let Some(trace) = &trace {
            let now = Instant::now();
            trace.timestamp("GRPC_WAITREAD_START", now);
            trace.timestamp("GRPC_WAITREAD_END", now);
        }
        // Before the inputs are read, as Triton checks the transaction policy first.
        let version = convert::parse_version(&request.model_version).map_err(to_status)?;
        let target = self
            .server
            .infer_target(&request.model_name, version, "ModelInfer RPC")
            .map_err(to_status)?;
        let (mut request, targets) =
            convert::decode_request(request, self.server.shm()).map_err(to_status)?;
        // After the body's parameters, as Triton's `ForwardHeadersAsParameters` runs.
        request.parameters.extend(forwarded.map_err(to_status)?);
        request.trace = trace.clone();
        let logged_id = id_for_log(&request.id);
        let answer = self.server.admit_to(target, request).map_err(|e| {
            if let Some(id) = &logged_id {
                log_refused(id, &e);
            }
            to_status(e)
        })?;
        let response = answer.await;
        // Success or error, the answer waits here when Triton's test hooks say so.
        self.infer_delays.hold().await;
        let response = response.map_err(to_status)?;
        let Some(trace) = trace else {
            return Ok(Response::new(
                convert::encode_response(response, &targets).map_err(to_status)?,
            ));
        };
        trace.timestamp("INFER_RESPONSE_COMPLETE", Instant::now());
        trace.timestamp("GRPC_SEND_START", Instant::now());
        let encoded = convert::encode_response(response, &targets).map_err(to_status)?;
        // tonic writes the message after this returns; the end is when it is handed over.
        trace.timestamp("GRPC_SEND_END", Instant::now());
        Ok(Response::new(encoded))
    }

    type ModelStreamInferStream = stream::ResponseStream;

    async fn model_stream_infer(
        &self,
        request: Request<Streaming<ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        // The stream's metadata applies to each of its requests.
        let forwarded = forward::forwarded(self.header_forward.as_deref(), request.metadata());
        let metadata = stream::StreamMetadata::new(request.metadata(), forwarded);
        Ok(Response::new(stream::start(
            self.server.clone(),
            request.into_inner(),
            metadata,
            self.response_pool_size,
        )))
    }

    async fn model_config(
        &self,
        request: Request<ModelConfigRequest>,
    ) -> Result<Response<ModelConfigResponse>, Status> {
        reply(admin::model_config(&self.server, request.get_ref()))
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        reply(admin::model_statistics(&self.server, request.get_ref()))
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        reply(admin::repository_index(&self.server, request.get_ref()).await)
    }

    async fn repository_model_load(
        &self,
        request: Request<RepositoryModelLoadRequest>,
    ) -> Result<Response<RepositoryModelLoadResponse>, Status> {
        let done = admin::repository_load(&self.server, request.get_ref()).await;
        reply(done.map(|()| RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        request: Request<RepositoryModelUnloadRequest>,
    ) -> Result<Response<RepositoryModelUnloadResponse>, Status> {
        let done = admin::repository_unload(&self.server, request.get_ref()).await;
        reply(done.map(|()| RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<SystemSharedMemoryStatusRequest>,
    ) -> Result<Response<SystemSharedMemoryStatusResponse>, Status> {
        reply(shm::system_status(&self.server, request.get_ref()))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<SystemSharedMemoryRegisterRequest>,
    ) -> Result<Response<SystemSharedMemoryRegisterResponse>, Status> {
        let done = shm::system_register(&self.server, request.get_ref());
        reply(done.map(|()| SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<SystemSharedMemoryUnregisterResponse>, Status> {
        let done = shm::unregister(&self.server, RegionKind::System, &request.get_ref().name);
        reply(done.map(|()| SystemSharedMemoryUnregisterResponse {}))
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<CudaSharedMemoryStatusRequest>,
    ) -> Result<Response<CudaSharedMemoryStatusResponse>, Status> {
        reply(shm::cuda_status(&self.server, request.get_ref()))
    }

    async fn cuda_shared_memory_register(
        &self,
        request: Request<CudaSharedMemoryRegisterRequest>,
    ) -> Result<Response<CudaSharedMemoryRegisterResponse>, Status> {
        let done = shm::cuda_register(&self.server, request.get_ref());
        reply(done.map(|()| CudaSharedMemoryRegisterResponse {}))
    }

    async fn cuda_shared_memory_unregister(
        &self,
        request: Request<CudaSharedMemoryUnregisterRequest>,
    ) -> Result<Response<CudaSharedMemoryUnregisterResponse>, Status> {
        let done = shm::unregister(&self.server, RegionKind::Cuda, &request.get_ref().name);
        reply(done.map(|()| CudaSharedMemoryUnregisterResponse {}))
    }

    async fn trace_setting(
        &self,
        request: Request<TraceSettingRequest>,
    ) -> Result<Response<TraceSettingResponse>, Status> {
        reply(trace::setting(&self.server, request.into_inner()))
    }

    async fn log_settings(
        &self,
        request: Request<LogSettingsRequest>,
    ) -> Result<Response<LogSettingsResponse>, Status> {
        reply(logging::log_settings(&self.server, request.into_inner()))
    }
}

/// `grpc.health.v1.Health`: SERVING while the server is ready, for any service name.
pub struct HealthService {
    /// The core.
    pub server: Arc<Server>,
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let status = if self.server.is_ready() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        Ok(Response::new(HealthCheckResponse {
            status: status.into(),
        }))
    }
}

#[cfg(test)]
mod decoupled_tests;
#[cfg(test)]
mod forward_tests;
#[cfg(test)]
mod grpc_error_tests;
#[cfg(test)]
mod http2_tests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz_tests;
