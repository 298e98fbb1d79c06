//! Connection limits shared by Nereid's three ports (HTTP, gRPC, metrics), so that no
//! client can hold a socket or a file descriptor forever (issue 14, item 5):
//!
//! - [`Acceptor`]: accepts under a cap on open connections; a connection over the cap is
//!   closed at once and counted in a rate-limited warning, instead of exhausting the
//!   process's file descriptors and locking every client out without a log line.
//! - [`Guarded`]: the accepted socket, which ends the connection (as an end of stream on
//!   its read side) when it stays idle between requests longer than the idle timeout, or
//!   when a request's head takes longer than the header timeout to arrive.
//! - [`TimedBody`]: a request body that fails when the client stops sending it.
//! - a write timeout inside [`Guarded`]: a client that stops reading its responses has its
//!   connection closed once a write has been blocked for the limit.
//!
//! The crate knows sockets and `http-body`, not hyper, axum or tonic: each frontend plugs
//! these pieces into its own server (a separate crate because the HTTP, gRPC and metrics
//! frontends live in three crates and the core must not name HTTP).

mod accept;
mod body;
mod guarded;
mod runtime;
mod stall;

use std::time::Duration;

pub use accept::Acceptor;
pub use body::{BodyTimedOut, BodyTimer, InFlightBody, TimedBody};
pub use guarded::{Activity, Guarded, InFlight};
pub use runtime::{default_io_threads, io_runtime};

/// Default cap on open connections per port (`--max-connections`): above the 10,000
/// concurrent sequences of BENCHMARKS.md §7 (one connection each, plus a control one).
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;
/// Default seconds for a request's head to arrive once its first byte has (nginx's
/// `client_header_timeout`).
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 60;
/// Default seconds allowed between two pieces of a request body (nginx's
/// `client_body_timeout`).
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 60;
/// Default seconds a connection may stay open with no request in flight.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 300;
/// Default seconds a write to a client may stay blocked (nginx's `send_timeout`).
pub const DEFAULT_WRITE_TIMEOUT_SECS: u64 = 60;

/// The limits one port enforces. A `None` timeout is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once; the next one is refused.
    pub max_connections: usize,
    /// Longest wait for a request's head, from its first byte to its last (HTTP/1 only:
    /// HTTP/2 frames its headers, and an incomplete frame is caught by the idle timer).
    pub header_timeout: Option<Duration>,
    /// Longest pause while a request body is being received.
    pub body_timeout: Option<Duration>,
    /// Longest time a connection stays open with no request in flight.
    pub idle_timeout: Option<Duration>,
    /// Longest time a write to the client may stay blocked (the client reads nothing).
    pub write_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Some(Duration::from_secs(DEFAULT_HEADER_TIMEOUT_SECS)),
            body_timeout: Some(Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS)),
            idle_timeout: Some(Duration::from_secs(DEFAULT_IDLE_TIMEOUT_SECS)),
            write_timeout: Some(Duration::from_secs(DEFAULT_WRITE_TIMEOUT_SECS)),
        }
    }
}
