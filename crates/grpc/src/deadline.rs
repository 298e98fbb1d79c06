//! A call's `grpc-timeout` ends it with DEADLINE_EXCEEDED, as gRPC's own servers (and so
//! Triton) answer. tonic's server enforces the header too, but answers CANCELLED "Timeout
//! expired"; under load its timer can fire before the client's, and a client waiting
//! for DEADLINE_EXCEEDED then sees CANCELLED. This layer runs inside tonic's and arms its
//! timer first, so at the deadline the call has already ended with gRPC's code when
//! tonic's timer looks; dropping the call is what tells a running model it was cancelled.
//!
//! As with tonic's timer, the deadline bounds the call until its response headers: a
//! stream's messages are not cut off by it.

use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{Either, FutureExt, Map};
use tokio::time::{error::Elapsed, Timeout};
use tonic::body::Body;
use tonic::codegen::http::{HeaderMap, Request, Response};
use tonic::Status;

/// The metadata key a gRPC client puts its deadline in.
const GRPC_TIMEOUT: &str = "grpc-timeout";

/// The deadline `headers` carry: `grpc-timeout` is 1 to 8 digits and a unit (`H`, `M`,
/// `S`, `m`, `u`, `n`); `None` without one, or for a value that breaks that form (gRPC's
/// servers ignore it then).
pub fn deadline_of(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(GRPC_TIMEOUT)?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Layer for [`Deadline`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer;

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline { inner }
    }
}

/// Ends a call that passes its `grpc-timeout` with DEADLINE_EXCEEDED; passes a call
/// without one straight through (no timer, no allocation).
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
}

/// A timed call's answer: its own, or gRPC's deadline status.
type Timed<F, E> =
    Map<Timeout<F>, fn(Result<Result<Response<Body>, E>, Elapsed>) -> Result<Response<Body>, E>>;

fn past_deadline<E>(
    outcome: Result<Result<Response<Body>, E>, Elapsed>,
) -> Result<Response<Body>, E> {
    outcome.unwrap_or_else(|_| Ok(Status::deadline_exceeded("Deadline Exceeded").into_http()))
}

impl<S> tower::Service<Request<Body>> for Deadline<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Either<Timed<S::Future, S::Error>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        match deadline_of(request.headers()) {
            Some(limit) => {
                let call = tokio::time::timeout(limit, self.inner.call(request));
                Either::Left(call.map(past_deadline::<S::Error> as fn(_) -> _))
            }
            None => Either::Right(self.inner.call(request)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::{Service, ServiceExt};

    fn headers(timeout: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(GRPC_TIMEOUT, timeout.parse().expect("ascii"));
        map
    }

    #[test]
    fn every_unit_of_the_header_is_read() {
        let cases = [
            ("2H", Duration::from_secs(7200)),
            ("3M", Duration::from_secs(180)),
            ("1S", Duration::from_secs(1)),
            ("999m", Duration::from_millis(999)),
            ("12345678u", Duration::from_micros(12_345_678)),
            ("7n", Duration::from_nanos(7)),
        ];
        for (value, expected) in cases {
            assert_eq!(deadline_of(&headers(value)), Some(expected), "{value}");
        }
    }

    #[test]
    fn a_malformed_header_sets_no_deadline() {
        for value in ["", "S", "10", "123456789S", "1.5S", "-1S", "10x", "1 S"] {
            assert_eq!(deadline_of(&headers(value)), None, "{value:?}");
        }
        assert_eq!(deadline_of(&HeaderMap::new()), None);
    }

    /// A service whose calls never answer: the model that outlives its deadline.
    fn never_answers() -> impl Service<
        Request<Body>,
        Response = Response<Body>,
        Error = Infallible,
        Future = impl std::future::Future<Output = Result<Response<Body>, Infallible>>,
    > + Clone {
        tower::service_fn(|_request: Request<Body>| std::future::pending())
    }

    fn grpc_status(response: &Response<Body>) -> Option<&str> {
        response
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_deadline_ends_with_deadline_exceeded() {
        let mut service = tower::Layer::layer(&DeadlineLayer, never_answers());
        let mut request = Request::new(Body::empty());
        *request.headers_mut() = headers("250m");
        let started = tokio::time::Instant::now();
        let response = service.ready().await.expect("ready").call(request).await;
        let response = response.expect("infallible");
        assert_eq!(grpc_status(&response), Some("4"), "DEADLINE_EXCEEDED");
        assert_eq!(started.elapsed(), Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_without_a_deadline_is_not_timed() {
        let mut service = tower::Layer::layer(&DeadlineLayer, never_answers());
        let call = service
            .ready()
            .await
            .expect("ready")
            .call(Request::new(Body::empty()));
        let waited = tokio::time::timeout(Duration::from_secs(3600), call).await;
        assert!(waited.is_err(), "the call still runs after an hour");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_before_the_deadline_is_the_calls_own() {
        let answers = tower::service_fn(|_request: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        });
        let mut service = tower::Layer::layer(&DeadlineLayer, answers);
        let mut request = Request::new(Body::empty());
        *request.headers_mut() = headers("1S");
        let response = service.ready().await.expect("ready").call(request).await;
        assert_eq!(grpc_status(&response.expect("infallible")), None);
    }
}
