//! The gRPC port's connections: accepted sockets under the connection cap (with their
//! idle timer), through TLS when configured, under the HTTP/2 policy ([`Watched`]); and
//! a tower layer that marks each call in flight on its connection until the call's
//! response stream ends, so that the idle timer runs only between calls and the ping
//! rules know whether calls are in flight.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use http_body::{Frame, SizeHint};
use nereid_net::{Acceptor, Activity, Guarded, InFlight, TimedBody};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;
use tonic::body::Body;
use tonic::codegen::http::{HeaderValue, Request, Response};
use tonic::transport::server::Connected;
use tonic::Code;

use crate::policy::Http2Policy;
use crate::tls::ServerTls;
use crate::watch::{CallCount, CallGuard, IdleExpiry, Watched};

/// The accepted connections, as tonic's `serve_with_incoming` wants them: through the
/// TLS handshake when `tls` is set, each under `policy`. Never ends; dropping it closes
/// the listening socket.
pub fn incoming(
    acceptor: Acceptor,
    tls: Option<&ServerTls>,
    policy: Http2Policy,
) -> BoxStream<'static, io::Result<Connection>> {
    match tls {
        Some(tls) => tls
            .accept_all(acceptor)
            .map(move |stream| Ok(Connection::new(Transport::Tls(Box::new(stream)), &policy)))
            .boxed(),
        None => futures::stream::unfold(acceptor, move |mut acceptor| async move {
            let guarded = acceptor.accept().await;
            let connection = Connection::new(Transport::Plain(guarded), &policy);
            Some((Ok(connection), acceptor))
        })
        .boxed(),
    }
}

/// The byte stream under the HTTP/2 policy: the socket, or TLS over it.
#[derive(Debug)]
pub enum Transport {
    /// Plaintext HTTP/2.
    Plain(Guarded),
    /// HTTP/2 over TLS (boxed: rustls's state is large).
    Tls(Box<TlsStream<Guarded>>),
}

impl Transport {
    fn socket(&self) -> &Guarded {
        match self {
            Transport::Plain(guarded) => guarded,
            Transport::Tls(tls) => tls.get_ref().0,
        }
    }
}

impl IdleExpiry for Transport {
    fn idle_expired(&self) -> bool {
        self.socket().timed_out()
    }
}

/// An accepted gRPC connection (tonic needs its own [`Connected`] trait on it).
pub struct Connection {
    io: Watched<Transport>,
    info: ConnectionInfo,
}

impl Connection {
    fn new(transport: Transport, policy: &Http2Policy) -> Self {
        let socket = transport.socket();
        let (activity, peer) = (socket.activity(), socket.peer());
        let calls = Arc::new(CallCount::default());
        Self {
            io: Watched::new(transport, peer, policy, calls.clone()),
            info: ConnectionInfo { activity, calls },
        }
    }
}

/// What each call on a connection finds in its request's extensions (tonic puts it
/// there): the connection's [`Activity`] and call count, to mark the call in flight (see
/// [`TrackCalls`]).
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    activity: Arc<Activity>,
    calls: Arc<CallCount>,
}

impl Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        self.info.clone()
    }
}

macro_rules! each_transport {
    ($this:expr, $io:ident => $body:expr) => {
        match $this {
            Transport::Plain($io) => $body,
            Transport::Tls($io) => $body,
        }
    };
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each_transport!(self.get_mut(), io => Pin::new(io).poll_read(cx, buf))
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each_transport!(self.get_mut(), io => Pin::new(io).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each_transport!(self.get_mut(), io => Pin::new(io).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        each_transport!(self, io => io.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_transport!(self.get_mut(), io => Pin::new(io).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each_transport!(self.get_mut(), io => Pin::new(io).poll_shutdown(cx))
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// tonic refuses a request message whose announced length is over
/// `--grpc-max-input-size` with OUT_OF_RANGE, and one that inflates past it with
/// RESOURCE_EXHAUSTED; gRPC's own servers (Triton's) answer RESOURCE_EXHAUSTED for both.
/// Nothing else here answers OUT_OF_RANGE (the core's error kinds have no such code), so
/// every OUT_OF_RANGE status in a response's headers is that refusal.
fn too_large_is_resource_exhausted(response: &mut Response<Body>) {
    let out_of_range = i32::from(Code::OutOfRange).to_string();
    if response
        .headers()
        .get(GRPC_STATUS)
        .is_some_and(|status| status.as_bytes() == out_of_range.as_bytes())
    {
        let code = i32::from(Code::ResourceExhausted);
        response
            .headers_mut()
            .insert(GRPC_STATUS, HeaderValue::from(code));
    }
}

const GRPC_STATUS: &str = "grpc-status";

/// Layer for [`TrackCalls`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TrackCallsLayer {
    /// Longest pause within a unary call's request body (`None`: no limit).
    pub unary_body_timeout: Option<Duration>,
}

impl<S> tower::Layer<S> for TrackCallsLayer {
    type Service = TrackCalls<S>;

    fn layer(&self, inner: S) -> TrackCalls<S> {
        TrackCalls {
            inner,
            unary_body_timeout: self.unary_body_timeout,
        }
    }
}

/// Marks each call in flight on its connection until its response body (for a stream,
/// the whole stream) has been sent or dropped, and fails a unary call whose request
/// body stalls: otherwise a client that stops mid-message holds the call, and the
/// connection under the cap, for as long as it stays connected.
#[derive(Debug, Clone)]
pub struct TrackCalls<S> {
    inner: S,
    unary_body_timeout: Option<Duration>,
}

/// The one call whose request body is a stream of messages that may pause at will.
const STREAM_INFER: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

type CallFuture<E> = Pin<Box<dyn std::future::Future<Output = Result<Response<Body>, E>> + Send>>;

impl<S> tower::Service<Request<Body>> for TrackCalls<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = CallFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let in_flight = request
            .extensions()
            .get::<ConnectionInfo>()
            .map(|info| (info.activity.begin(), info.calls.begin()));
        let request = match self.unary_body_timeout {
            Some(timeout) if request.uri().path() != STREAM_INFER => {
                request.map(|body| Body::new(TimedBody::new(body, timeout).0))
            }
            _ => request,
        };
        let call = self.inner.call(request);
        Box::pin(async move {
            let mut response = call.await?;
            too_large_is_resource_exhausted(&mut response);
            Ok(response.map(|body| {
                Body::new(CallBody {
                    inner: body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// A response body that keeps its call counted in flight (for the idle timer and the
/// ping rules) until it has been sent or dropped.
struct CallBody {
    inner: Body,
    _in_flight: Option<(InFlight, CallGuard)>,
}

impl http_body::Body for CallBody {
    type Data = <Body as http_body::Body>::Data;
    type Error = <Body as http_body::Body>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
