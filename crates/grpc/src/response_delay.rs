//! Triton's test hook `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=N`: every gRPC call
//! other than inference is carried out, then its answer waits N seconds before it is
//! written. Triton's QA (L0_client_timeout) sets it to see client deadlines expire on
//! every non-inference RPC. Triton reads it in `grpc_server.cc` (`CommonHandler`,
//! `CommonCallData::WriteResponse`); unset, empty, unparseable or 0 means no delay.
//!
//! Here the wait is a timer after the call's answer is ready, so a delayed call holds no
//! thread (Triton's sleeps on its one non-inference handler thread).

use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, Either, FutureExt};
use nereid_core::restricted::ApiGroup;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};

use crate::restrict::group_of;

/// The variable that names the delay in whole seconds.
pub const DELAY_VAR: &str = "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC";

/// The delay a variable's `value` names, read as Triton reads it (`atoi`: leading
/// digits, anything else 0); `None` for no delay.
pub fn delay_from(value: Option<&str>) -> Option<Duration> {
    let value = value?.trim_start();
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    let seconds: u64 = digits.parse().ok()?;
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

/// Layer for [`ResponseDelay`]: `None` passes every call straight through.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponseDelayLayer(pub Option<Duration>);

impl<S> tower::Layer<S> for ResponseDelayLayer {
    type Service = ResponseDelay<S>;

    fn layer(&self, inner: S) -> ResponseDelay<S> {
        ResponseDelay {
            inner,
            delay: self.0,
        }
    }
}

/// Holds the answer of each non-inference call for the delay.
#[derive(Debug, Clone)]
pub struct ResponseDelay<S> {
    inner: S,
    delay: Option<Duration>,
}

impl<S> tower::Service<Request<Body>> for ResponseDelay<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Either<BoxFuture<'static, Result<Response<Body>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let inference = group_of(request.uri().path()) == Some(ApiGroup::Inference);
        let answer = self.inner.call(request);
        match self.delay {
            Some(delay) if !inference => Either::Left(
                async move {
                    let answer = answer.await;
                    tracing::debug!(
                        "Delaying the write of the response by {} seconds",
                        delay.as_secs()
                    );
                    tokio::time::sleep(delay).await;
                    answer
                }
                .boxed(),
            ),
            _ => Either::Right(answer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::{Layer, Service};

    #[test]
    fn the_delay_is_read_as_atoi_reads_it() {
        assert_eq!(delay_from(None), None);
        assert_eq!(delay_from(Some("")), None);
        assert_eq!(delay_from(Some("0")), None);
        assert_eq!(delay_from(Some("x2")), None);
        assert_eq!(delay_from(Some("2")), Some(Duration::from_secs(2)));
        assert_eq!(delay_from(Some(" 3s")), Some(Duration::from_secs(3)));
    }

    fn call(path: &str) -> Request<Body> {
        Request::builder()
            .uri(format!("http://localhost{path}"))
            .body(Body::empty())
            .expect("request")
    }

    #[tokio::test(start_paused = true)]
    async fn only_non_inference_answers_wait() {
        let answers = tower::service_fn(|_: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        });
        let mut service = ResponseDelayLayer(Some(Duration::from_secs(2))).layer(answers);
        let started = tokio::time::Instant::now();
        service
            .call(call("/inference.GRPCInferenceService/ModelInfer"))
            .await
            .expect("answer");
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "inference is not delayed"
        );
        for path in [
            "/inference.GRPCInferenceService/ServerLive",
            "/inference.GRPCInferenceService/RepositoryModelLoad",
            "/grpc.health.v1.Health/Check",
        ] {
            let before = tokio::time::Instant::now();
            service.call(call(path)).await.expect("answer");
            assert_eq!(before.elapsed(), Duration::from_secs(2), "{path}");
        }
    }
}
