//! The gRPC connection's HTTP/2 policy, applied to its plaintext bytes between the socket
//! (or TLS) and hyper: [`Watched`] reads the frame headers going each way
//! ([`crate::frames`]) and enforces the rules of [`crate::policy`] that hyper's h2 has no
//! setting for:
//!
//! - client PINGs against the ping-abuse policy; past the strikes it writes a GOAWAY
//!   `ENHANCE_YOUR_CALM` "too_many_pings" and closes the connection, as gRPC core does;
//! - the server's keep-alive PINGs (sent only with a call in flight unless permitted, at
//!   most `--grpc-http2-max-pings-without-data` in a row without DATA or HEADERS going
//!   out), whose acknowledgements it takes out of the stream before hyper sees them;
//! - the close at `--grpc-max-connection-age` plus its grace;
//! - a GOAWAY `NO_ERROR` "idle_timeout" when the socket's idle timer
//!   (`--grpc-idle-timeout-secs`) ends the connection, so the client knows the close is
//!   deliberate and no call was lost, as gRPC core's `max_connection_idle` does.
//!
//! Its own frames go in only at a frame boundary of what hyper writes. The connection's
//! close is seen by hyper as the client's end of stream.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::frames::{self, Event, Scanner, HEADER_LEN, PING_FRAME_LEN};
use crate::policy::{Http2Policy, KeepAlive, KeepAliveAction, PingAbuse};

/// The opaque payload of the server's keep-alive PINGs, by which their acknowledgements
/// are recognized (and taken out of the stream; hyper's own PINGs carry others).
pub const KEEPALIVE_PAYLOAD: [u8; 8] = *b"nereidKA";
/// After its GOAWAY, how long a closing connection waits for the client to close first
/// (so the client reads the GOAWAY rather than a reset).
const LINGER: Duration = Duration::from_secs(1);
const TOO_MANY_PINGS: &[u8] = b"too_many_pings";
const IDLE_TIMEOUT: &[u8] = b"idle_timeout";
/// Room for our longest GOAWAY (its debug data is one of the two texts above).
const GOAWAY_LEN: usize = HEADER_LEN + 8 + TOO_MANY_PINGS.len();

/// The calls in flight on one connection, counted by the tower layer that sees them
/// begin and end ([`crate::limits::TrackCalls`]) and read by the connection's policy.
#[derive(Debug, Default)]
pub struct CallCount(AtomicUsize);

impl CallCount {
    /// Counts a call until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> CallGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        CallGuard(self.clone())
    }

    fn any(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }
}

/// One call counted in its connection's [`CallCount`].
#[derive(Debug)]
pub struct CallGuard(Arc<CallCount>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Frames of our own waiting for a frame boundary of hyper's output (a keep-alive PING,
/// a GOAWAY, or a PING then a GOAWAY).
#[derive(Debug)]
struct Injection {
    bytes: [u8; PING_FRAME_LEN + GOAWAY_LEN],
    written: usize,
    len: usize,
    /// A GOAWAY is among the bytes: the connection closes once they are out.
    goaway: bool,
}

impl Injection {
    fn pending(&self) -> bool {
        self.written < self.len
    }

    fn push(&mut self, frame: &[u8]) {
        if !self.pending() {
            self.written = 0;
            self.len = 0;
        }
        self.bytes[self.len..self.len + frame.len()].copy_from_slice(frame);
        self.len += frame.len();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// The GOAWAY is out: read and drop the client's bytes until it closes or this time.
    Draining(Instant),
    /// Closed: reads see the end of stream, writes are dropped.
    Closed,
}

/// A socket whose read side may end because its idle timer ran out (the gRPC port's
/// transport over `nereid_net::Guarded`): the policy then says GOAWAY first.
pub trait IdleExpiry {
    /// Whether the last end of stream read was the idle timer's, not the client's.
    fn idle_expired(&self) -> bool;
}

/// A connection's byte stream under the HTTP/2 policy (see the module documentation).
#[derive(Debug)]
pub struct Watched<IO> {
    io: IO,
    peer: SocketAddr,
    calls: Arc<CallCount>,
    permit_without_calls: bool,
    abuse: PingAbuse,
    keepalive: KeepAlive,
    /// When the keep-alive next wants a look.
    keepalive_wake: Option<Instant>,
    force_close_at: Option<Instant>,
    read: Scanner,
    write: Scanner,
    /// The first bytes of a client frame that may be a keep-alive acknowledgement, held
    /// back from hyper until the frame is whole.
    held: [u8; PING_FRAME_LEN],
    held_len: usize,
    /// Set when `held` turned out to be for hyper: the index of its next byte to hand over.
    releasing: Option<usize>,
    /// The highest stream a client opened, for the GOAWAY's last stream.
    last_stream_id: u32,
    inject: Injection,
    flush: bool,
    shutdown: bool,
    phase: Phase,
    /// Fires at `armed_for`; polled from every read and write.
    timer: Pin<Box<Sleep>>,
    armed_for: Option<Instant>,
}

impl<IO: AsyncRead + AsyncWrite + Unpin + IdleExpiry> Watched<IO> {
    /// `io` (a connection from `peer`, just accepted) under `policy`, its calls counted
    /// in `calls`.
    pub fn new(io: IO, peer: SocketAddr, policy: &Http2Policy, calls: Arc<CallCount>) -> Self {
        let now = Instant::now();
        Self {
            io,
            peer,
            calls,
            permit_without_calls: policy.permit_without_calls,
            abuse: PingAbuse::new(policy),
            keepalive: KeepAlive::new(policy, now),
            keepalive_wake: None,
            force_close_at: policy.force_close_at(now),
            read: Scanner::client(),
            write: Scanner::server(),
            held: [0; PING_FRAME_LEN],
            held_len: 0,
            releasing: None,
            last_stream_id: 0,
            inject: Injection {
                bytes: [0; PING_FRAME_LEN + GOAWAY_LEN],
                written: 0,
                len: 0,
                goaway: false,
            },
            flush: false,
            shutdown: false,
            phase: Phase::Open,
            timer: Box::pin(tokio::time::sleep_until(now)),
            armed_for: None,
        }
    }

    fn close(&mut self, why: &str) {
        tracing::debug!("closing the gRPC connection from {}: {why}", self.peer);
        self.phase = Phase::Closed;
    }

    /// Runs the timers and writes pending frames of our own; called before each read and
    /// write, so the timer's waker is always the connection task's.
    fn drive(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            let now = Instant::now();
            match self.phase {
                Phase::Open => self.apply_timers(now),
                Phase::Draining(until) if now >= until => self.phase = Phase::Closed,
                _ => {}
            }
            if self.phase == Phase::Closed {
                return Ok(());
            }
            self.write_injection(cx)?;
            if self.flush {
                if let Poll::Ready(done) = Pin::new(&mut self.io).poll_flush(cx) {
                    done?;
                    self.flush = false;
                }
            }
            if self.shutdown {
                // The client is told no more is coming; failures only mean it is gone.
                if Pin::new(&mut self.io).poll_shutdown(cx).is_ready() {
                    self.shutdown = false;
                }
            }
            let next = match self.phase {
                Phase::Draining(until) => Some(until),
                _ => [self.keepalive_wake, self.force_close_at]
                    .into_iter()
                    .flatten()
                    .min(),
            };
            let Some(at) = next else {
                return Ok(());
            };
            // Deadlines mostly move later (each read pushes the keep-alive back): a timer
            // set earlier is kept, and when it fires the next pass sets the new time.
            if self.armed_for.is_none_or(|armed| at < armed) {
                self.timer.as_mut().reset(at);
                self.armed_for = Some(at);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            self.armed_for = None;
        }
    }

    fn apply_timers(&mut self, now: Instant) {
        if self.force_close_at.is_some_and(|at| now >= at) {
            self.close("--grpc-max-connection-age-grace ran out with calls still in flight");
            return;
        }
        self.keepalive_wake = None;
        match self.keepalive.poll(now, self.calls.any()) {
            KeepAliveAction::Wait(wake) => self.keepalive_wake = wake,
            KeepAliveAction::Ping => {
                // Frames of ours still waiting mean the socket is not draining: this PING
                // would not get out either, and its timeout runs all the same.
                if !self.inject.pending() {
                    self.inject
                        .push(&frames::ping_frame(false, KEEPALIVE_PAYLOAD));
                }
                // Look again when the acknowledgement is due.
                if let KeepAliveAction::Wait(wake) = self.keepalive.poll(now, self.calls.any()) {
                    self.keepalive_wake = wake;
                }
            }
            KeepAliveAction::TimedOut => self.close("the keep-alive PING went unanswered"),
        }
    }

    /// Writes our pending frames if hyper's output is at a frame boundary.
    fn write_injection(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.inject.pending() || !self.write.at_boundary() {
            return Ok(());
        }
        while self.inject.pending() {
            let rest = &self.inject.bytes[self.inject.written..self.inject.len];
            match Pin::new(&mut self.io).poll_write(cx, rest) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => self.inject.written += n,
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            }
        }
        self.flush = true;
        if self.inject.goaway {
            self.phase = Phase::Draining(Instant::now() + LINGER);
            self.shutdown = true;
        }
        Ok(())
    }

    /// Handles one frame event of the client's.
    fn client_event(&mut self, event: Event) {
        match event {
            Event::Frame(header) if header.kind == frames::HEADERS => {
                self.last_stream_id = self.last_stream_id.max(header.stream_id);
            }
            Event::Ping { ack: false, .. } => {
                let idle = !self.permit_without_calls && !self.calls.any();
                if self.abuse.received_ping(Instant::now(), idle) && !self.inject.goaway {
                    tracing::debug!(
                        "gRPC connection from {}: too many pings, sending GOAWAY ENHANCE_YOUR_CALM",
                        self.peer
                    );
                    self.say_goaway(frames::ENHANCE_YOUR_CALM, TOO_MANY_PINGS);
                }
            }
            _ => {}
        }
    }

    /// Queues a GOAWAY (the last stream the client opened, `error`, `debug`); once it is
    /// written the connection drains and closes.
    fn say_goaway(&mut self, error: u32, debug: &[u8]) {
        let mut goaway = [0u8; GOAWAY_LEN];
        let len = frames::goaway_frame(&mut goaway, self.last_stream_id, error, debug);
        self.inject.push(&goaway[..len]);
        self.inject.goaway = true;
    }

    /// Reads the bytes just put into `buf` from `start` on: handles their events, takes
    /// out the acknowledgements of our PINGs, and holds back a trailing frame that may be
    /// one until it is whole.
    fn scan_read(&mut self, buf: &mut ReadBuf<'_>, start: usize) {
        let mut at = start;
        while at < buf.filled().len() {
            let (used, event) = self.read.advance(&buf.filled()[at..]);
            at += used;
            match event {
                Some(Event::Ping {
                    ack: true,
                    payload: KEEPALIVE_PAYLOAD,
                }) => {
                    // The whole frame is in `buf` (a partial one would have been held).
                    let Some(frame_start) = at.checked_sub(PING_FRAME_LEN).filter(|s| *s >= start)
                    else {
                        continue;
                    };
                    let len = buf.filled().len();
                    buf.filled_mut().copy_within(at..len, frame_start);
                    buf.set_filled(len - PING_FRAME_LEN);
                    at = frame_start;
                    self.keepalive.ack_received(Instant::now());
                }
                Some(event) => self.client_event(event),
                None => {}
            }
        }
        let undecided = self.read.undecided();
        if undecided > 0 {
            let len = buf.filled().len();
            self.held[..undecided].copy_from_slice(&buf.filled()[len - undecided..]);
            self.held_len = undecided;
            buf.set_filled(len - undecided);
            self.read.rewind();
        }
    }

    /// Reads more of a held-back frame from the socket until it is known to be ours (and
    /// dropped) or hyper's (and released).
    fn complete_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut probe = self.read;
            let mut at = 0;
            let mut ours = false;
            while at < self.held_len {
                let (used, event) = probe.advance(&self.held[at..self.held_len]);
                at += used;
                ours |= event
                    == Some(Event::Ping {
                        ack: true,
                        payload: KEEPALIVE_PAYLOAD,
                    });
            }
            if ours {
                self.held_len = 0;
                self.keepalive.ack_received(Instant::now());
                return Poll::Ready(Ok(()));
            }
            let needed = match probe.undecided() {
                0 => {
                    // Hyper's: read its events, then hand it over.
                    let mut at = 0;
                    while at < self.held_len {
                        let (used, event) = self.read.advance(&self.held[at..self.held_len]);
                        at += used;
                        if let Some(event) = event {
                            self.client_event(event);
                        }
                    }
                    self.releasing = Some(0);
                    return Poll::Ready(Ok(()));
                }
                n if n < HEADER_LEN => HEADER_LEN,
                _ => PING_FRAME_LEN,
            };
            let mut more = ReadBuf::new(&mut self.held[self.held_len..needed]);
            ready!(Pin::new(&mut self.io).poll_read(cx, &mut more))?;
            let got = more.filled().len();
            if got == 0 {
                // The client closed inside a frame: hyper gets what there is, then the end.
                self.releasing = Some(0);
                return Poll::Ready(Ok(()));
            }
            self.held_len += got;
            self.keepalive.bytes_received(Instant::now());
        }
    }

    /// Hands released held-back bytes to hyper; true if any were.
    fn release_held(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        let Some(from) = self.releasing else {
            return false;
        };
        let n = buf.remaining().min(self.held_len - from);
        buf.put_slice(&self.held[from..from + n]);
        if from + n == self.held_len {
            self.releasing = None;
            self.held_len = 0;
        } else {
            self.releasing = Some(from + n);
        }
        n > 0
    }

    /// Reads and drops the client's bytes after the GOAWAY, until it closes.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut scratch = [0u8; 1024];
        loop {
            let mut sink = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.io).poll_read(cx, &mut sink) {
                Poll::Ready(Ok(())) if !sink.filled().is_empty() => continue,
                Poll::Ready(_) => {
                    self.phase = Phase::Closed;
                    return Poll::Ready(Ok(()));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Notes the frames of what hyper wrote.
    fn scan_written(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let (used, event) = self.write.advance(data);
            data = &data[used..];
            if let Some(Event::Frame(header)) = event {
                if header.kind == frames::DATA || header.kind == frames::HEADERS {
                    self.abuse.data_sent();
                    self.keepalive.data_sent();
                }
            }
        }
    }

    /// How much of `buf` hyper may write now: all of it, or, while frames of ours wait,
    /// up to the end of its frame under way.
    fn writable(&self, buf: &[u8]) -> Option<usize> {
        if !self.inject.pending() {
            return Some(buf.len());
        }
        if self.write.at_boundary() {
            // Ours go first, and the socket took none of them just now.
            return None;
        }
        Some(self.write.to_boundary(buf).unwrap_or(buf.len()))
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + IdleExpiry> AsyncRead for Watched<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            this.drive(cx)?;
            match this.phase {
                Phase::Open => {}
                Phase::Draining(_) => return this.poll_drain(cx),
                Phase::Closed => return Poll::Ready(Ok(())),
            }
            if this.release_held(buf) {
                return Poll::Ready(Ok(()));
            }
            if this.held_len > 0 {
                ready!(this.complete_held(cx))?;
                continue;
            }
            let start = buf.filled().len();
            let read = ready!(Pin::new(&mut this.io).poll_read(cx, buf));
            // TLS reads a timer's end of stream as a close without close_notify: an error.
            let ended = read.is_err() || buf.filled().len() == start;
            if ended && this.io.idle_expired() && !this.inject.goaway {
                tracing::debug!(
                    "gRPC connection from {}: idle timeout, sending GOAWAY",
                    this.peer
                );
                this.say_goaway(frames::NO_ERROR, IDLE_TIMEOUT);
                continue;
            }
            read?;
            if ended {
                return Poll::Ready(Ok(()));
            }
            this.keepalive.bytes_received(Instant::now());
            this.scan_read(buf, start);
            if buf.filled().len() > start {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + IdleExpiry> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.drive(cx)?;
        if this.phase != Phase::Open {
            // The connection is going away; hyper learns it from the read side.
            return Poll::Ready(Ok(buf.len()));
        }
        let Some(limit) = this.writable(buf) else {
            return Poll::Pending;
        };
        let n = ready!(Pin::new(&mut this.io).poll_write(cx, &buf[..limit]))?;
        this.scan_written(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.drive(cx)?;
        let total = bufs.iter().map(|b| b.len()).sum();
        if this.phase != Phase::Open {
            return Poll::Ready(Ok(total));
        }
        if this.inject.pending() {
            // Up to the frame boundary, one slice at a time.
            let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| b);
            return Pin::new(this).poll_write(cx, first);
        }
        let n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for b in bufs {
            let take = left.min(b.len());
            this.scan_written(&b[..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.drive(cx)?;
        if this.phase != Phase::Open {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.phase == Phase::Closed {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
