//! A connection's client that stops reading: its socket's send buffer fills and every
//! write stays pending. Without a limit the connection, its response and whatever the
//! response holds back (a streaming model) wait for as long as the client stays connected.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// Times how long a connection's writes have been blocked without progress.
#[derive(Debug)]
pub(crate) struct WriteStall {
    limit: Option<Duration>,
    /// When the current run of pending writes began.
    since: Option<Instant>,
    timer: Pin<Box<Sleep>>,
    armed_for: Option<Instant>,
}

impl WriteStall {
    /// A stall timer that fails writes blocked for longer than `limit` (`None`: never).
    pub(crate) fn new(limit: Option<Duration>) -> Self {
        Self {
            limit,
            since: None,
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed_for: None,
        }
    }

    /// Passes a write's outcome through. Progress (or an error) ends a stall; a write still
    /// pending once the stall has lasted the limit fails with `TimedOut`, which makes the
    /// server close the connection.
    pub(crate) fn check<T>(
        &mut self,
        result: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        let (Poll::Pending, Some(limit)) = (&result, self.limit) else {
            self.since = None;
            return result;
        };
        let now = Instant::now();
        let deadline = *self.since.get_or_insert(now) + limit;
        if deadline > now {
            if self.armed_for != Some(deadline) {
                self.timer.as_mut().reset(deadline);
                self.armed_for = Some(deadline);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the client read nothing for {} s", limit.as_secs()),
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(60);

    fn pending(stall: &mut WriteStall) -> Poll<io::Result<usize>> {
        stall.check(Poll::Pending, &mut Context::from_waker(Waker::noop()))
    }

    fn wrote(stall: &mut WriteStall) -> Poll<io::Result<usize>> {
        stall.check(Poll::Ready(Ok(1)), &mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_blocked_past_the_limit_fails() {
        let mut stall = WriteStall::new(Some(LIMIT));
        assert!(pending(&mut stall).is_pending());
        tokio::time::advance(LIMIT - Duration::from_secs(1)).await;
        assert!(pending(&mut stall).is_pending());
        tokio::time::advance(Duration::from_secs(1)).await;
        match pending(&mut stall) {
            Poll::Ready(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::TimedOut),
            other => panic!("expected a timed-out write, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn progress_restarts_the_clock_and_no_limit_never_fails() {
        let mut stall = WriteStall::new(Some(LIMIT));
        assert!(pending(&mut stall).is_pending());
        tokio::time::advance(LIMIT - Duration::from_secs(1)).await;
        assert!(matches!(wrote(&mut stall), Poll::Ready(Ok(1))));
        assert!(pending(&mut stall).is_pending());
        tokio::time::advance(LIMIT - Duration::from_secs(1)).await;
        assert!(
            pending(&mut stall).is_pending(),
            "timed from the last progress"
        );
        let mut off = WriteStall::new(None);
        assert!(pending(&mut off).is_pending());
        tokio::time::advance(LIMIT * 100).await;
        assert!(pending(&mut off).is_pending());
    }
}
