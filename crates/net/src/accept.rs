//! Accepting connections under a cap, with a rate-limited refusal warning.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::{Guarded, Limits};

/// How often a burst of refusals (or of accept errors) may write a log line.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Pause after an accept error that is not the client's doing (e.g. out of file
/// descriptors), so the loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A listener that hands out [`Guarded`] connections, at most
/// [`Limits::max_connections`] open at once. Owned by its port's accept loop.
pub struct Acceptor {
    listener: TcpListener,
    /// One permit per open connection; each [`Guarded`] holds its own until it is dropped.
    permits: Arc<Semaphore>,
    limits: Limits,
    /// The port's name in log lines ("HTTP", "gRPC", "metrics").
    port: &'static str,
    refusals: BurstLog,
    errors: BurstLog,
}

impl Acceptor {
    /// Accepts on `listener` under `limits`; `port` names the port in log lines.
    pub fn new(listener: TcpListener, port: &'static str, limits: Limits) -> Self {
        Self {
            listener,
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
            port,
            refusals: BurstLog::default(),
            errors: BurstLog::default(),
        }
    }

    /// The next connection within the cap. Connections over the cap are closed as they
    /// arrive and reported in a warning at most once a second, with their count; accept
    /// errors are logged the same way and retried after a short pause. Cancel-safe.
    pub async fn accept(&mut self) -> Guarded {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) if is_per_connection(&e) => continue,
                Err(e) => {
                    if let Some(count) = self.errors.record(Instant::now()) {
                        tracing::error!(
                            "{} port: accepting a connection failed ({count} times since the last report): {e}",
                            self.port
                        );
                    }
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            };
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                drop(stream);
                if let Some(count) = self.refusals.record(Instant::now()) {
                    tracing::warn!(
                        "{} port: refused a connection from {peer}: {} connections are open, the --max-connections limit ({count} refused since the last report)",
                        self.port,
                        self.limits.max_connections
                    );
                }
                continue;
            };
            // Small responses must not wait for Nagle's algorithm.
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!("{} port: TCP_NODELAY on {peer}: {e}", self.port);
            }
            return Guarded::new(stream, peer, permit, &self.limits);
        }
    }
}

/// Errors that concern one connection that is already gone, not the listener.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}

/// Counts events and says when a report is due: the first event, then at most one report
/// per [`REPORT_INTERVAL`], each with the events counted since the previous report.
#[derive(Debug, Default)]
struct BurstLog {
    last_report: Option<Instant>,
    unreported: u64,
}

impl BurstLog {
    /// Counts one event at `now`; `Some(count)` when a line should be logged now.
    fn record(&mut self, now: Instant) -> Option<u64> {
        self.unreported += 1;
        if self
            .last_report
            .is_some_and(|last| now.duration_since(last) < REPORT_INTERVAL)
        {
            return None;
        }
        self.last_report = Some(now);
        Some(std::mem::take(&mut self.unreported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    #[tokio::test(start_paused = true)]
    async fn refusals_are_reported_once_a_second_with_their_count() {
        let mut log = BurstLog::default();
        let start = Instant::now();
        assert_eq!(log.record(start), Some(1), "the first refusal is reported");
        for _ in 0..5 {
            tokio::time::advance(Duration::from_millis(100)).await;
            assert_eq!(log.record(Instant::now()), None);
        }
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(
            log.record(Instant::now()),
            Some(6),
            "one second on: the five held back and this one"
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(log.record(Instant::now()), Some(1));
    }

    #[tokio::test]
    async fn a_connection_over_the_cap_is_closed_at_once_and_the_others_stay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let limits = Limits {
            max_connections: 1,
            ..Limits::default()
        };
        let mut acceptor = Acceptor::new(listener, "test", limits);
        let _first_client = TcpStream::connect(addr).await.expect("connect");
        let first = acceptor.accept().await;
        let mut refused = TcpStream::connect(addr).await.expect("connect");
        // The acceptor closes the second connection and waits for a third.
        let third = tokio::time::timeout(Duration::from_millis(200), acceptor.accept()).await;
        assert!(third.is_err(), "nothing within the cap to accept");
        let mut byte = [0u8; 1];
        let read = refused.read(&mut byte).await;
        assert!(
            matches!(read, Ok(0)) || read.is_err(),
            "refused socket closed"
        );
        drop(first);
        let _again = TcpStream::connect(addr).await.expect("connect");
        tokio::time::timeout(Duration::from_secs(5), acceptor.accept())
            .await
            .expect("a closed connection frees its place");
    }
}
