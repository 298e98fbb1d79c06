//! Request and response bodies that take part in the connection limits.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::InFlight;

type BoxError = Box<dyn StdError + Send + Sync>;

/// The error a [`TimedBody`] ends with when the client pauses too long.
#[derive(Debug, thiserror::Error)]
#[error("request body not received: nothing arrived for {}s", .0.as_secs_f64())]
pub struct BodyTimedOut(pub Duration);

/// A request body that fails with [`BodyTimedOut`] when no piece of it arrives for the
/// body timeout (the timer restarts with each piece, as nginx's `client_body_timeout`
/// does, so a large body on a slow but steady link still gets through).
#[derive(Debug)]
pub struct TimedBody<B> {
    inner: B,
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
    timed_out: Arc<AtomicBool>,
}

/// Tells the request's handler, after the fact, whether its body timed out (the
/// application sees only a failed read, and may answer it in its own way).
#[derive(Debug, Clone)]
pub struct BodyTimer(Arc<AtomicBool>);

impl BodyTimer {
    /// Whether the body ended with [`BodyTimedOut`].
    pub fn timed_out(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl<B> TimedBody<B> {
    /// Wraps `inner`; the first piece is due within `timeout` from now.
    pub fn new(inner: B, timeout: Duration) -> (Self, BodyTimer) {
        let timed_out = Arc::new(AtomicBool::new(false));
        let body = Self {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            timed_out: timed_out.clone(),
        };
        (body, BodyTimer(timed_out))
    }
}

impl<B> Body for TimedBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = Instant::now() + this.timeout;
                this.sleep.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if this.sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.timed_out.store(true, Ordering::Relaxed);
                Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request marked in flight (see
/// [`Activity::begin`](crate::Activity::begin)) until it has been sent or dropped, so that
/// the idle timer of a connection never runs while a response (or a stream of them) is
/// still going out.
#[derive(Debug)]
pub struct InFlightBody<B> {
    inner: B,
    _in_flight: Option<InFlight>,
}

impl<B> InFlightBody<B> {
    /// `inner`, holding `in_flight` (if the connection tracks its requests) until dropped.
    pub fn new(inner: B, in_flight: Option<InFlight>) -> Self {
        Self {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl<B: Body + Unpin> Body for InFlightBody<B> {
    type Data = B::Data;
    type Error = B::Error;

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
