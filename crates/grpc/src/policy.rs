//! gRPC core's HTTP/2 connection rules on the server side, as Triton sets them from its
//! command line, kept apart from the bytes ([`crate::watch`] feeds them the frames):
//!
//! - [`PingAbuse`]: a client PING that arrives sooner than allowed after the previous one
//!   is a strike; one strike over the limit ends the connection with a GOAWAY
//!   `ENHANCE_YOUR_CALM` "too_many_pings" (`--grpc-http2-min-recv-ping-interval-without-data`,
//!   `--grpc-http2-max-ping-strikes`, `--grpc-keepalive-permit-without-calls`).
//! - [`KeepAlive`]: the server's own keep-alive PINGs, which close a connection whose peer
//!   stopped answering (`--grpc-keepalive-time`, `--grpc-keepalive-timeout`,
//!   `--grpc-http2-max-pings-without-data`, `--grpc-keepalive-permit-without-calls`).
//!
//! Times are passed in, so the rules are tested on paused time.

use std::time::Duration;

use tokio::time::Instant;

/// With no call in flight and `--grpc-keepalive-permit-without-calls` off, a client may
/// ping once in two hours (gRPC core: RFC 1122's floor for TCP keep-alive).
pub const IDLE_PING_INTERVAL: Duration = Duration::from_secs(2 * 60 * 60);

/// The connection rules of the gRPC port, from its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Policy {
    /// Quiet time after which the server pings the client (`--grpc-keepalive-time`).
    pub keepalive_time: Duration,
    /// How long a keep-alive PING may go unanswered (`--grpc-keepalive-timeout`).
    pub keepalive_timeout: Duration,
    /// Whether pings are fine with no call in flight, the server's and the client's
    /// (`--grpc-keepalive-permit-without-calls`).
    pub permit_without_calls: bool,
    /// Most keep-alive PINGs the server sends until it next sends DATA or HEADERS; 0 is
    /// no limit (`--grpc-http2-max-pings-without-data`).
    pub max_pings_without_data: u32,
    /// Shortest gap between two client PINGs while the server sends nothing
    /// (`--grpc-http2-min-recv-ping-interval-without-data`).
    pub min_recv_ping_interval: Duration,
    /// Strikes tolerated before the GOAWAY; 0 is no limit (`--grpc-http2-max-ping-strikes`).
    pub max_ping_strikes: u32,
    /// After its GOAWAY at `--grpc-max-connection-age`, how long a connection's calls
    /// may go on before it is closed (`--grpc-max-connection-age-grace`); `None` waits
    /// for them.
    pub max_connection_age_grace: Option<Duration>,
    /// `--grpc-max-connection-age` (the GOAWAY itself is hyper's graceful shutdown).
    pub max_connection_age: Option<Duration>,
}

impl Default for Http2Policy {
    /// gRPC core's server defaults, which Triton's flags default to.
    fn default() -> Self {
        Self {
            keepalive_time: Duration::from_secs(2 * 60 * 60),
            keepalive_timeout: Duration::from_secs(20),
            permit_without_calls: false,
            max_pings_without_data: 2,
            min_recv_ping_interval: Duration::from_secs(5 * 60),
            max_ping_strikes: 2,
            max_connection_age_grace: None,
            max_connection_age: None,
        }
    }
}

impl Http2Policy {
    /// When a connection accepted at `opened` must be closed whatever its calls are
    /// doing: its age plus its grace, when both are set.
    pub fn force_close_at(&self, opened: Instant) -> Option<Instant> {
        let age = self.max_connection_age?;
        let grace = self.max_connection_age_grace?;
        opened.checked_add(age)?.checked_add(grace)
    }
}

/// The client PINGs a connection has received, against the policy.
#[derive(Debug)]
pub struct PingAbuse {
    min_interval: Duration,
    max_strikes: u32,
    /// When the previous client PING arrived since the server last sent DATA or HEADERS.
    last_ping: Option<Instant>,
    strikes: u32,
}

impl PingAbuse {
    /// A connection's record under `policy`.
    pub fn new(policy: &Http2Policy) -> Self {
        Self {
            min_interval: policy.min_recv_ping_interval,
            max_strikes: policy.max_ping_strikes,
            last_ping: None,
            strikes: 0,
        }
    }

    /// Counts a client PING arriving at `now`; `idle` when the connection has no call in
    /// flight and pings without calls are not permitted. True when the strikes are over
    /// the limit: the connection must go away.
    pub fn received_ping(&mut self, now: Instant, idle: bool) -> bool {
        let interval = if idle {
            IDLE_PING_INTERVAL
        } else {
            self.min_interval
        };
        let too_soon = self
            .last_ping
            .is_some_and(|last| now.saturating_duration_since(last) < interval);
        self.last_ping = Some(now);
        if !too_soon {
            return false;
        }
        self.strikes += 1;
        self.max_strikes != 0 && self.strikes > self.max_strikes
    }

    /// The server sent DATA or HEADERS: the strikes and the interval start over.
    pub fn data_sent(&mut self) {
        self.last_ping = None;
        self.strikes = 0;
    }
}

/// What the keep-alive wants done now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAliveAction {
    /// Nothing; look again at this time (`None`: only after something happens).
    Wait(Option<Instant>),
    /// Send a keep-alive PING now.
    Ping,
    /// The last PING went unanswered for the timeout: close the connection.
    TimedOut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeepAliveState {
    /// Ping when this time comes and nothing has arrived meanwhile.
    Waiting(Instant),
    /// A ping was due, but the pings allowed without data are spent: ping once the
    /// server sends DATA or HEADERS.
    Blocked(Instant),
    /// A ping is out; close unless it is acknowledged by then.
    Pinging(Instant),
}

/// The server's keep-alive PINGs on one connection.
#[derive(Debug)]
pub struct KeepAlive {
    time: Duration,
    timeout: Duration,
    permit_without_calls: bool,
    max_without_data: u32,
    /// Pings left before the server must send DATA or HEADERS again.
    pings_left: u32,
    state: KeepAliveState,
}

impl KeepAlive {
    /// A connection's keep-alive under `policy`, opened at `now`.
    pub fn new(policy: &Http2Policy, now: Instant) -> Self {
        Self {
            time: policy.keepalive_time,
            timeout: policy.keepalive_timeout,
            permit_without_calls: policy.permit_without_calls,
            max_without_data: policy.max_pings_without_data,
            pings_left: policy.max_pings_without_data,
            state: KeepAliveState::Waiting(now + policy.keepalive_time),
        }
    }

    /// Bytes arrived from the client: the quiet time starts over.
    pub fn bytes_received(&mut self, now: Instant) {
        if let KeepAliveState::Waiting(_) = self.state {
            self.state = KeepAliveState::Waiting(now + self.time);
        }
    }

    /// The client acknowledged the server's PING.
    pub fn ack_received(&mut self, now: Instant) {
        if let KeepAliveState::Pinging(_) = self.state {
            self.state = KeepAliveState::Waiting(now + self.time);
        }
    }

    /// The server sent DATA or HEADERS: pings are allowed again.
    pub fn data_sent(&mut self) {
        self.pings_left = self.max_without_data;
        if let KeepAliveState::Blocked(due) = self.state {
            self.state = KeepAliveState::Waiting(due);
        }
    }

    /// What to do at `now`, with `calls` in flight. [`KeepAliveAction::Ping`] counts
    /// the PING as sent from now.
    pub fn poll(&mut self, now: Instant, calls: bool) -> KeepAliveAction {
        match self.state {
            KeepAliveState::Pinging(deadline) if now >= deadline => KeepAliveAction::TimedOut,
            KeepAliveState::Pinging(deadline) => KeepAliveAction::Wait(Some(deadline)),
            KeepAliveState::Blocked(_) => KeepAliveAction::Wait(None),
            KeepAliveState::Waiting(due) if now < due => KeepAliveAction::Wait(Some(due)),
            KeepAliveState::Waiting(_) if !calls && !self.permit_without_calls => {
                // gRPC core pings only while calls are in flight, unless permitted.
                let due = now + self.time;
                self.state = KeepAliveState::Waiting(due);
                KeepAliveAction::Wait(Some(due))
            }
            KeepAliveState::Waiting(due) if self.max_without_data != 0 && self.pings_left == 0 => {
                self.state = KeepAliveState::Blocked(due);
                KeepAliveAction::Wait(None)
            }
            KeepAliveState::Waiting(_) => {
                self.pings_left = self.pings_left.saturating_sub(1);
                self.state = KeepAliveState::Pinging(now + self.timeout);
                KeepAliveAction::Ping
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    fn policy() -> Http2Policy {
        Http2Policy {
            keepalive_time: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(2),
            min_recv_ping_interval: Duration::from_secs(5),
            ..Http2Policy::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pings_sooner_than_the_interval_strike_and_the_third_strike_is_out() {
        let mut abuse = PingAbuse::new(&policy());
        assert!(!abuse.received_ping(Instant::now(), false), "first ping");
        for strike in 1..=2 {
            advance(Duration::from_secs(1)).await;
            assert!(
                !abuse.received_ping(Instant::now(), false),
                "strike {strike}"
            );
        }
        advance(Duration::from_secs(1)).await;
        assert!(abuse.received_ping(Instant::now(), false), "over the limit");
    }

    #[tokio::test(start_paused = true)]
    async fn pings_at_the_interval_never_strike() {
        let mut abuse = PingAbuse::new(&policy());
        for _ in 0..10 {
            assert!(!abuse.received_ping(Instant::now(), false));
            advance(Duration::from_secs(5)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_call_in_flight_the_interval_is_two_hours() {
        let mut abuse = PingAbuse::new(&policy());
        abuse.received_ping(Instant::now(), true);
        advance(Duration::from_secs(3600)).await;
        abuse.received_ping(Instant::now(), true);
        advance(Duration::from_secs(3600)).await;
        abuse.received_ping(Instant::now(), true);
        advance(Duration::from_secs(3600)).await;
        assert!(abuse.received_ping(Instant::now(), true), "three strikes");
    }

    #[tokio::test(start_paused = true)]
    async fn data_sent_forgives_the_strikes_and_zero_strikes_is_no_limit() {
        let mut abuse = PingAbuse::new(&policy());
        for _ in 0..2 {
            abuse.received_ping(Instant::now(), false);
        }
        abuse.data_sent();
        for _ in 0..3 {
            assert!(!abuse.received_ping(Instant::now(), false));
        }
        let mut unlimited = PingAbuse::new(&Http2Policy {
            max_ping_strikes: 0,
            ..policy()
        });
        for _ in 0..100 {
            assert!(!unlimited.received_ping(Instant::now(), false));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn keepalive_pings_after_quiet_time_and_times_out_without_an_ack() {
        let opened = Instant::now();
        let mut keepalive = KeepAlive::new(&policy(), opened);
        let due = opened + Duration::from_secs(10);
        assert_eq!(
            keepalive.poll(opened, true),
            KeepAliveAction::Wait(Some(due))
        );
        advance(Duration::from_secs(6)).await;
        keepalive.bytes_received(Instant::now());
        advance(Duration::from_secs(6)).await;
        assert!(
            matches!(
                keepalive.poll(Instant::now(), true),
                KeepAliveAction::Wait(_)
            ),
            "bytes arrived 6s ago: not quiet for 10s yet"
        );
        advance(Duration::from_secs(4)).await;
        assert_eq!(keepalive.poll(Instant::now(), true), KeepAliveAction::Ping);
        advance(Duration::from_secs(1)).await;
        keepalive.ack_received(Instant::now());
        advance(Duration::from_secs(10)).await;
        assert_eq!(keepalive.poll(Instant::now(), true), KeepAliveAction::Ping);
        advance(Duration::from_secs(2)).await;
        assert_eq!(
            keepalive.poll(Instant::now(), true),
            KeepAliveAction::TimedOut
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keepalive_waits_for_a_call_unless_permitted() {
        let mut keepalive = KeepAlive::new(&policy(), Instant::now());
        advance(Duration::from_secs(10)).await;
        assert!(matches!(
            keepalive.poll(Instant::now(), false),
            KeepAliveAction::Wait(Some(_))
        ));
        let permitted = Http2Policy {
            permit_without_calls: true,
            ..policy()
        };
        let mut keepalive = KeepAlive::new(&permitted, Instant::now());
        advance(Duration::from_secs(10)).await;
        assert_eq!(keepalive.poll(Instant::now(), false), KeepAliveAction::Ping);
    }

    #[tokio::test(start_paused = true)]
    async fn pings_without_data_are_limited_until_data_is_sent() {
        let mut keepalive = KeepAlive::new(&policy(), Instant::now());
        for _ in 0..2 {
            advance(Duration::from_secs(10)).await;
            assert_eq!(keepalive.poll(Instant::now(), true), KeepAliveAction::Ping);
            keepalive.ack_received(Instant::now());
        }
        advance(Duration::from_secs(10)).await;
        assert_eq!(
            keepalive.poll(Instant::now(), true),
            KeepAliveAction::Wait(None),
            "two pings without data: the third waits"
        );
        advance(Duration::from_secs(60)).await;
        assert_eq!(
            keepalive.poll(Instant::now(), true),
            KeepAliveAction::Wait(None),
            "and no timeout runs meanwhile"
        );
        keepalive.data_sent();
        assert_eq!(keepalive.poll(Instant::now(), true), KeepAliveAction::Ping);
        let unlimited = Http2Policy {
            max_pings_without_data: 0,
            ..policy()
        };
        let mut keepalive = KeepAlive::new(&unlimited, Instant::now());
        for _ in 0..5 {
            advance(Duration::from_secs(10)).await;
            assert_eq!(keepalive.poll(Instant::now(), true), KeepAliveAction::Ping);
            keepalive.ack_received(Instant::now());
        }
    }

    #[test]
    fn force_close_needs_both_age_and_grace() {
        let now = Instant::now();
        let age = Http2Policy {
            max_connection_age: Some(Duration::from_secs(60)),
            ..Http2Policy::default()
        };
        assert_eq!(age.force_close_at(now), None, "no grace: calls may finish");
        let both = Http2Policy {
            max_connection_age_grace: Some(Duration::from_secs(5)),
            ..age
        };
        assert_eq!(
            both.force_close_at(now),
            Some(now + Duration::from_secs(65))
        );
    }
}
