//! Triton's scheduler test hooks: `TRITONSERVER_DELAY_SCHEDULER=N` holds a batcher until
//! N requests are queued, and `TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M` additionally holds
//! the direct sequence batcher until M requests wait in its backlog. Tests set them so
//! that what runs together does not depend on how fast requests arrive. Each hold is
//! lifted once, for good, when its condition first holds; it has no timeout.
//!
//! Where Triton reads them (triton-inference-server/core):
//! - `src/dynamic_batch_scheduler.cc` `BatcherThread`: the dynamic batcher (one per model;
//!   for the `oldest` sequence strategy, one per instance) waits for N queued requests.
//!   The default scheduler has no batcher thread, so it never waits.
//! - `src/sequence_batch_scheduler/sequence_batch_scheduler.cc`: each direct instance
//!   waits until the requests queued in all instances' slots reach N
//!   (`DirectSequenceBatch::BatcherThread`, `DelayScheduler`) and, when M > 0, until M
//!   requests are backlogged. M alone does nothing.
//!
//! The variables are read when a scheduler is built, never per request.

/// The variable naming how many queued requests a batcher waits for.
pub const DELAY_VAR: &str = "TRITONSERVER_DELAY_SCHEDULER";
/// The variable naming how many backlogged requests the direct sequence batcher waits for.
pub const BACKLOG_DELAY_VAR: &str = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER";

/// The hook settings a scheduler starts with; zero means no hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Requests to queue before batching starts.
    pub queued: usize,
    /// Backlogged requests the direct sequence batcher also waits for (with `queued > 0`).
    pub backlog: usize,
}

impl Hooks {
    /// The settings from the environment, read once by each scheduler at construction.
    pub fn from_env() -> Self {
        Self {
            queued: from_var(DELAY_VAR),
            backlog: from_var(BACKLOG_DELAY_VAR),
        }
    }
}

fn from_var(name: &str) -> usize {
    match std::env::var(name) {
        Ok(value) => parse(name, &value),
        Err(std::env::VarError::NotPresent) => 0,
        Err(std::env::VarError::NotUnicode(_)) => {
            tracing::warn!("ignoring {name}: its value is not a count");
            0
        }
    }
}

/// A count from `value`. Triton uses `atoi`, which reads "5x" as 5, anything else as 0,
/// and "-1" as a hold that never ends; here a value that is not a whole number is
/// ignored with a warning, so a typo cannot silently stall a server.
pub fn parse(name: &str, value: &str) -> usize {
    match value.trim().parse::<usize>() {
        Ok(count) => {
            if count > 0 {
                tracing::info!(
                    "{name}={count}: test hook set, schedulers hold until it is reached"
                );
            }
            count
        }
        Err(_) => {
            tracing::warn!("ignoring {name}={value:?}: not a non-negative whole number");
            0
        }
    }
}

/// One batching loop's hold: closed until its threshold is reached once, then open for
/// good, as each of Triton's batcher threads clears its own count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hold {
    /// The threshold; 0 once lifted (or when there never was one).
    until: usize,
}

impl Hold {
    /// A hold until `count` requests are queued (0: no hold).
    pub fn until(count: usize) -> Self {
        Self { until: count }
    }

    /// Whether the loop must keep waiting. `reached` is asked, with the threshold, whether
    /// the condition is met; once it is, the hold is lifted and never asks again.
    pub fn holds(&mut self, reached: impl FnOnce(usize) -> bool) -> bool {
        if self.until == 0 {
            return false;
        }
        if reached(self.until) {
            self.until = 0;
            return false;
        }
        true
    }

    /// Whether the hold still applies.
    pub fn is_held(&self) -> bool {
        self.until > 0
    }

    /// Lifts the hold at once (the scheduler is stopping: what is queued must drain).
    pub fn lift(&mut self) {
        self.until = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_counts_and_ignores_the_rest() {
        assert_eq!(parse(DELAY_VAR, "8"), 8);
        assert_eq!(parse(DELAY_VAR, " 12 "), 12);
        assert_eq!(parse(DELAY_VAR, "0"), 0);
        assert_eq!(parse(DELAY_VAR, ""), 0);
        assert_eq!(parse(DELAY_VAR, "-1"), 0);
        assert_eq!(parse(DELAY_VAR, "5x"), 0);
        assert_eq!(parse(DELAY_VAR, "99999999999999999999999"), 0);
    }

    #[test]
    fn a_hold_lifts_once_and_for_good() {
        let mut hold = Hold::until(3);
        assert!(hold.holds(|n| 2 >= n));
        assert!(hold.is_held());
        assert!(!hold.holds(|n| 3 >= n));
        assert!(!hold.holds(|_| false), "never held again");
        assert!(!Hold::default().holds(|_| false));
        let mut stopping = Hold::until(3);
        stopping.lift();
        assert!(!stopping.holds(|_| false));
    }
}
