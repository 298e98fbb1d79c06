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
///
/// The timer is armed only when a read finds nothing waiting, and counts from then: the
/// reader asks again as soon as a piece is taken, so that is when the last piece arrived,
/// and a body that is already buffered whole (nearly every request) reads no clock and
/// allocates no timer.
#[derive(Debug)]
pub struct TimedBody<B> {
    inner: B,
    timeout: Duration,
    /// Kept once allocated, re-armed for each wait.
    sleep: Option<Pin<Box<Sleep>>>,
    /// Whether `sleep` runs for the current wait (false again once a piece arrives).
    armed: bool,
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
    /// Wraps `inner`; each wait for a piece may last `timeout`.
    pub fn new(inner: B, timeout: Duration) -> (Self, BodyTimer) {
        let timed_out = Arc::new(AtomicBool::new(false));
        let body = Self {
            inner,
            timeout,
            sleep: None,
            armed: false,
            timed_out: timed_out.clone(),
        };
        (body, BodyTimer(timed_out))
    }

    /// The timer of the current wait, started now if the wait has just begun.
    fn wait_timer(&mut self) -> Pin<&mut Sleep> {
        if !self.armed {
            self.armed = true;
            let deadline = Instant::now() + self.timeout;
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        let timeout = self.timeout;
        // Set just above when the wait began; the fallback is never taken.
        self.sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)))
            .as_mut()
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
                this.armed = false;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if this.wait_timer().poll(cx).is_pending() {
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use bytes::Bytes;
    use tokio::sync::mpsc;

    use super::*;

    /// A body whose pieces a test sends one at a time.
    struct Pieces(mpsc::UnboundedReceiver<&'static str>);

    impl Body for Pieces {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.get_mut()
                .0
                .poll_recv(cx)
                .map(|piece| piece.map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes())))))
        }
    }

    /// Reads `body` to its end: the pieces, or the error it ended with.
    async fn read_all<B>(mut body: TimedBody<B>) -> Result<VecDeque<Bytes>, BoxError>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BoxError>,
    {
        let mut pieces = VecDeque::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            if let Ok(data) = frame?.into_data() {
                pieces.push_back(data);
            }
        }
        Ok(pieces)
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_body_gets_through_and_a_stalled_one_times_out() {
        let timeout = Duration::from_secs(2);
        let (tx, rx) = mpsc::unbounded_channel();
        let (body, timer) = TimedBody::new(Pieces(rx), timeout);
        let reader = tokio::spawn(read_all(body));
        // Three pieces 1.5 s apart: each wait is under the timeout, the total is not.
        for piece in ["a", "b", "c"] {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            tx.send(piece).expect("reader alive");
        }
        drop(tx);
        let pieces = reader.await.expect("joined").expect("steady body");
        assert_eq!(pieces.len(), 3);
        assert!(!timer.timed_out());

        let (tx, rx) = mpsc::unbounded_channel();
        let (body, timer) = TimedBody::new(Pieces(rx), timeout);
        let started = Instant::now();
        let reader = tokio::spawn(read_all(body));
        tokio::time::sleep(Duration::from_millis(500)).await;
        tx.send("a").expect("reader alive");
        let error = reader.await.expect("joined").expect_err("stalled");
        assert!(error.is::<BodyTimedOut>(), "{error}");
        // The wait counts from the last piece, not from the start.
        assert_eq!(started.elapsed(), Duration::from_millis(2500));
        assert!(timer.timed_out());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_read_whole_never_arms_the_timer() {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send("whole").expect("open");
        drop(tx);
        let mut body = TimedBody::new(Pieces(rx), Duration::from_secs(1)).0;
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        assert!(frame.is_some());
        assert!(body.sleep.is_none());
    }
}
