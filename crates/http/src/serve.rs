//! Serving a router on HTTP/1.1 under the port's connection limits (hyper directly:
//! `axum::serve` has no timeouts and no connection cap). One task per connection; the
//! accept loop stops at shutdown and the connections drain their in-flight requests.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use futures::FutureExt;
use http_body_util::Either;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use nereid_net::{Acceptor, Activity, InFlightBody, Limits, TimedBody};
use tokio::net::TcpListener;
use tower::Service;

use crate::error::error_body;
use crate::infer_route::InferRoute;

/// Serves `router` on `listener` until `shutdown` resolves, under `limits`; then stops
/// accepting and returns once every connection has finished its request in flight.
/// `port` names the port in log lines. Shared by the HTTP and metrics ports.
pub async fn serve_router(
    router: Router,
    listener: TcpListener,
    port: &'static str,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    serve_routes(
        router,
        None,
        listener,
        port,
        RequestLog::Off,
        limits,
        shutdown,
    )
    .await;
}

/// How the HTTP port's requests are logged at verbose level 1, as Triton's HTTP server logs
/// each (`HTTP request: <method> <path>`, the method as libevhtp numbers it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestLog {
    /// Each request is logged (the KServe HTTP port).
    Verbose,
    /// None is (the metrics port and the cloud endpoints).
    Off,
}

/// [`serve_router`] with the infer route answered ahead of the table.
pub(crate) async fn serve_routes(
    router: Router,
    infer: Option<InferRoute>,
    listener: TcpListener,
    port: &'static str,
    request_log: RequestLog,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let infer = infer.map(Arc::new);
    let mut acceptor = Acceptor::new(listener, port, limits);
    let mut builder = http1::Builder::new();
    // The connection's own timers replace hyper's header timer, which would also run
    // between requests and so close idle keep-alive connections after the header timeout.
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let io = tokio::select! {
            io = acceptor.accept() => io,
            () = &mut shutdown => break,
        };
        let peer = io.peer();
        let service = ConnectionService {
            router: router.clone(),
            infer: infer.clone(),
            activity: io.activity(),
            body_timeout: limits.body_timeout,
            request_log,
        };
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("{port} connection from {peer} ended: {e}");
            }
        });
    }
    // Closes the listening socket before the drain, so new clients are refused at once.
    drop(acceptor);
    graceful.shutdown().await;
}

/// One connection's requests: each marked in flight on the connection until its response
/// is sent, its body under the body timeout.
#[derive(Clone)]
struct ConnectionService {
    router: Router,
    infer: Option<Arc<InferRoute>>,
    activity: Arc<Activity>,
    body_timeout: Option<Duration>,
    request_log: RequestLog,
}

/// A response as the connection sends it: the body is wrapped, not boxed again, so that
/// marking the request in flight costs no allocation.
type SentResponse = Response<InFlightBody<Body>>;

type ResponseFuture = Pin<Box<dyn Future<Output = Result<SentResponse, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = SentResponse;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        if self.request_log == RequestLog::Verbose {
            tracing::debug!(
                "HTTP request: {} {}",
                evhtp_method(request.method()),
                request.uri().path()
            );
        }
        let in_flight = self.activity.begin();
        let mut timer = None;
        let request = request.map(|body| match self.body_timeout {
            Some(timeout) => {
                let (body, body_timer) = TimedBody::new(body, timeout);
                timer = Some(body_timer);
                Either::Left(body)
            }
            None => Either::Right(body),
        });
        let finish = move |response: Response<Body>| {
            if timer.as_ref().is_some_and(|t| t.timed_out()) {
                return body_timed_out().map(|body| InFlightBody::new(body, None));
            }
            response.map(|body| InFlightBody::new(body, Some(in_flight)))
        };
        match &self.infer {
            Some(infer) if InferRoute::answers(&request) => {
                // The body is read as hyper gives it, not boxed into axum's first. A
                // combinator, not an `async` block: a block would keep the answer's
                // future twice (captured, and again while awaited).
                Box::pin(infer.answer(request).map(move |answer| Ok(finish(answer))))
            }
            _ => {
                let mut router = self.router.clone();
                let request = request.map(Body::new);
                Box::pin(async move { Ok(finish(router.call(request).await?)) })
            }
        }
    }
}

/// libevhtp's number for `method` (its `htp_method` enumeration), which Triton logs.
fn evhtp_method(method: &axum::http::Method) -> u8 {
    const NUMBERED: [&str; 16] = [
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "DELETE",
        "MKCOL",
        "COPY",
        "MOVE",
        "OPTIONS",
        "PROPFIND",
        "PROPPATCH",
        "LOCK",
        "UNLOCK",
        "TRACE",
        "CONNECT",
        "PATCH",
    ];
    NUMBERED
        .iter()
        .position(|name| *name == method.as_str())
        .map_or(16, |n| n as u8)
}

/// 408, and the connection closes: the rest of the body may still be on its way.
fn body_timed_out() -> Response<Body> {
    let mut response = error_body(
        StatusCode::REQUEST_TIMEOUT,
        "request body not received within the body timeout",
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::evhtp_method;

    #[test]
    fn methods_are_numbered_as_libevhtp_numbers_them() {
        // As Triton logs them: "HTTP request: 0 /v2/health/ready", "2 /v2/models/m/infer".
        assert_eq!(evhtp_method(&Method::GET), 0);
        assert_eq!(evhtp_method(&Method::POST), 2);
        assert_eq!(evhtp_method(&Method::DELETE), 4);
        assert_eq!(evhtp_method(&Method::PATCH), 15);
        let other = Method::from_bytes(b"BREW").expect("a token");
        assert_eq!(evhtp_method(&other), 16);
    }
}
