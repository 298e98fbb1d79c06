//! The gRPC port's connection limits: accepted sockets under the connection cap (with
//! their idle timer), and a tower layer that marks each call in flight on its connection
//! until the call's response stream ends, so that the idle timer runs only between calls.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use nereid_net::{Acceptor, Activity, Guarded, InFlightBody};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::codegen::http::{HeaderValue, Request, Response};
use tonic::transport::server::Connected;
use tonic::Code;

/// The accepted connections, as tonic's `serve_with_incoming` wants them. Never ends;
/// dropping it closes the listening socket.
pub fn incoming(acceptor: Acceptor) -> impl Stream<Item = io::Result<Connection>> {
    futures::stream::unfold(acceptor, |mut acceptor| async move {
        let connection = Connection(acceptor.accept().await);
        Some((Ok(connection), acceptor))
    })
}

/// An accepted gRPC connection (tonic needs its own [`Connected`] trait on it).
pub struct Connection(Guarded);

/// What each call on a connection finds in its request's extensions (tonic puts it
/// there): the connection's [`Activity`], to mark the call in flight (see [`TrackCalls`]).
#[derive(Debug, Clone)]
pub struct ConnectionInfo(Arc<Activity>);

impl Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        ConnectionInfo(self.0.activity())
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
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
pub struct TrackCallsLayer;

impl<S> tower::Layer<S> for TrackCallsLayer {
    type Service = TrackCalls<S>;

    fn layer(&self, inner: S) -> TrackCalls<S> {
        TrackCalls { inner }
    }
}

/// Marks each call in flight on its connection until its response body (for a stream,
/// the whole stream) has been sent or dropped.
#[derive(Debug, Clone)]
pub struct TrackCalls<S> {
    inner: S,
}

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
            .map(|info| info.0.begin());
        let call = self.inner.call(request);
        Box::pin(async move {
            let mut response = call.await?;
            too_large_is_resource_exhausted(&mut response);
            Ok(response.map(|body| Body::new(InFlightBody::new(body, in_flight))))
        })
    }
}
