//! The accepted socket with its idle and header-read timers, and the per-connection
//! request count those timers read.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use crate::stall::WriteStall;
use crate::Limits;

/// What one connection is doing, shared by its socket ([`Guarded`], which reads it to
/// decide when the connection has been idle too long) and its server's request handling
/// (which holds an [`InFlight`] per request, from its head to its response's end).
#[derive(Debug)]
pub struct Activity {
    /// Held for a few field updates, never across an `.await`.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    in_flight: usize,
    /// When the last request in flight ended (or the connection opened).
    idle_since: Instant,
    /// When the first byte after `idle_since` arrived: a request head is being read.
    head_started: Option<Instant>,
}

/// When a connection's timer should next fire, and whether the connection expires then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    /// Nothing to watch: no timeout applies.
    None,
    /// A request is in flight: look again at this time.
    Recheck(Instant),
    /// The connection expires at this time unless something happens first.
    Expire(Instant),
}

impl Activity {
    fn new(now: Instant) -> Self {
        Self {
            state: Mutex::new(State {
                in_flight: 0,
                idle_since: now,
                head_started: None,
            }),
        }
    }

    /// Marks a request in flight until the returned guard is dropped; while any is, the
    /// connection's idle and header timers do not run.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        let mut state = self.state.lock();
        state.in_flight += 1;
        state.head_started = None;
        InFlight(self.clone())
    }

    fn bytes_read(&self) {
        let mut state = self.state.lock();
        if state.in_flight == 0 && state.head_started.is_none() {
            state.head_started = Some(Instant::now());
        }
    }

    fn deadline(&self, now: Instant, limits: &Timers) -> Deadline {
        let state = self.state.lock();
        if state.in_flight > 0 {
            return match limits.idle.or(limits.header) {
                Some(period) => Deadline::Recheck(now + period),
                None => Deadline::None,
            };
        }
        let idle = limits.idle.map(|d| state.idle_since + d);
        let header = limits.header.zip(state.head_started).map(|(d, t)| t + d);
        match (idle, header) {
            (Some(a), Some(b)) => Deadline::Expire(a.min(b)),
            (Some(t), None) | (None, Some(t)) => Deadline::Expire(t),
            (None, None) => Deadline::None,
        }
    }
}

/// One request in flight on a connection (see [`Activity::begin`]).
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Timers {
    idle: Option<Duration>,
    header: Option<Duration>,
}

/// An accepted connection within its port's cap. It reads and writes like the socket,
/// and its read side reports end of stream once the connection has had no request in
/// flight for the idle timeout, or has spent longer than the header timeout on a request
/// head: the server then closes the connection as if the client had. Dropping it closes
/// the socket and frees its place under the cap.
#[derive(Debug)]
pub struct Guarded {
    stream: TcpStream,
    peer: SocketAddr,
    activity: Arc<Activity>,
    timers: Timers,
    /// Fires at `armed_for`; polled from `poll_read`, which the server always has pending.
    timer: Pin<Box<Sleep>>,
    armed_for: Option<Instant>,
    /// The waker the armed timer was last polled with: it wakes that one when it fires.
    timer_waker: Option<Waker>,
    expired: bool,
    // Boxed: keeps the socket wrapper small for the transports that hold it inline.
    stall: Box<WriteStall>,
    _permit: OwnedSemaphorePermit,
}

impl Guarded {
    pub(crate) fn new(
        stream: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        limits: &Limits,
    ) -> Self {
        let now = Instant::now();
        Self {
            stream,
            peer,
            activity: Arc::new(Activity::new(now)),
            timers: Timers {
                idle: limits.idle_timeout,
                header: limits.header_timeout,
            },
            timer: Box::pin(tokio::time::sleep_until(now)),
            armed_for: None,
            timer_waker: None,
            expired: false,
            stall: Box::new(WriteStall::new(limits.write_timeout)),
            _permit: permit,
        }
    }

    /// Whether the read side reported end of stream because a timer ran out (the idle or
    /// header timeout), not because the client closed: a protocol with a goodbye of its
    /// own (HTTP/2's GOAWAY) can still say it before the socket closes.
    pub fn timed_out(&self) -> bool {
        self.expired
    }

    /// The connection's activity, for the server to mark its requests in flight.
    pub fn activity(&self) -> Arc<Activity> {
        self.activity.clone()
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Whether the connection's time is up; arms the timer for the next look otherwise.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            let now = Instant::now();
            let (at, expires) = match self.activity.deadline(now, &self.timers) {
                Deadline::None => return false,
                Deadline::Recheck(at) => (at, false),
                Deadline::Expire(at) => (at, true),
            };
            if expires && at <= now {
                return true;
            }
            // A timer armed for earlier stays: when it fires, the next pass re-arms it for
            // the deadline then. A recheck is so never pushed back forever, and a busy
            // connection, whose idle deadline moves with every request, moves no timer
            // (a reset takes the runtime's timer lock).
            let keep = self
                .armed_for
                .is_some_and(|armed| armed > now && armed <= at);
            if !keep && self.armed_for != Some(at) {
                self.timer.as_mut().reset(at);
                self.armed_for = Some(at);
                self.timer_waker = None;
            }
            // A timer not yet due, already polled by this task, will wake it: polling it
            // again on every read would only register the same waker again.
            let due = self.armed_for.is_none_or(|armed| armed <= now);
            let registered = self
                .timer_waker
                .as_ref()
                .is_some_and(|waker| waker.will_wake(cx.waker()));
            if !due && registered {
                return false;
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                self.timer_waker = Some(cx.waker().clone());
                return false;
            }
            // Fired: the next pass either expires the connection or re-arms the timer.
            self.armed_for = None;
            self.timer_waker = None;
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.activity.bytes_read();
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        if this.poll_expired(cx) {
            tracing::debug!("closing the connection from {}: timed out", this.peer);
            this.expired = true;
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.stall.check(written, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.stall.check(written, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(300);
    const HEADER: Duration = Duration::from_secs(60);
    const BOTH: Timers = Timers {
        idle: Some(IDLE),
        header: Some(HEADER),
    };

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_expires_after_the_idle_timeout() {
        let opened = Instant::now();
        let activity = Arc::new(Activity::new(opened));
        assert_eq!(
            activity.deadline(opened, &BOTH),
            Deadline::Expire(opened + IDLE)
        );
        let off = Timers {
            idle: None,
            header: None,
        };
        assert_eq!(activity.deadline(opened, &off), Deadline::None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_head_must_finish_within_the_header_timeout() {
        let opened = Instant::now();
        let activity = Arc::new(Activity::new(opened));
        tokio::time::advance(Duration::from_secs(10)).await;
        let first_byte = Instant::now();
        activity.bytes_read();
        tokio::time::advance(Duration::from_secs(5)).await;
        activity.bytes_read();
        assert_eq!(
            activity.deadline(Instant::now(), &BOTH),
            Deadline::Expire(first_byte + HEADER),
            "timed from the head's first byte, not its latest"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_timer_runs_out_while_a_request_is_in_flight() {
        let activity = Arc::new(Activity::new(Instant::now()));
        activity.bytes_read();
        let request = activity.begin();
        tokio::time::advance(Duration::from_secs(3600)).await;
        let now = Instant::now();
        assert_eq!(activity.deadline(now, &BOTH), Deadline::Recheck(now + IDLE));
        drop(request);
        let ended = Instant::now();
        assert_eq!(
            activity.deadline(ended, &BOTH),
            Deadline::Expire(ended + IDLE),
            "idle counts from the end of the last request, and the head timer was reset"
        );
    }

    /// Polls `guarded`'s read side once, as the server does while waiting for the next
    /// request: whether it reported end of stream.
    fn poll_once(guarded: &mut Guarded) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut space = [0u8; 16];
        let mut buf = ReadBuf::new(&mut space);
        matches!(
            Pin::new(guarded).poll_read(&mut cx, &mut buf),
            Poll::Ready(Ok(()))
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_expires_one_idle_timeout_after_its_last_request() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let _client = TcpStream::connect(address).await.expect("connect");
        let (stream, peer) = listener.accept().await.expect("accept");
        let permit = Arc::new(tokio::sync::Semaphore::new(1))
            .acquire_owned()
            .await
            .expect("permit");
        let limits = Limits {
            idle_timeout: Some(IDLE),
            header_timeout: None,
            ..Limits::default()
        };
        let mut guarded = Guarded::new(stream, peer, permit, &limits);
        let activity = guarded.activity();
        assert!(
            !poll_once(&mut guarded),
            "armed for the first idle deadline"
        );
        // Requests keep coming for longer than the idle timeout; after each the server
        // polls again (the timer armed for an earlier deadline stays armed).
        let mut last_end = Instant::now();
        for _ in 0..5 {
            tokio::time::advance(IDLE / 2).await;
            drop(activity.begin());
            last_end = Instant::now();
            assert!(!poll_once(&mut guarded), "still busy");
        }
        let mut rest = [0u8; 1];
        let read = tokio::io::AsyncReadExt::read(&mut guarded, &mut rest)
            .await
            .expect("read");
        assert_eq!(read, 0, "end of stream at the idle timeout");
        assert!(guarded.timed_out());
        assert_eq!(
            Instant::now(),
            last_end + IDLE,
            "not at a deadline armed earlier"
        );
    }
}
