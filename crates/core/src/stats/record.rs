//! One admitted request's entry in its model's statistics. It is opened when the request
//! enters the model (pending goes up) and closed exactly once: succeeded, failed, or, if it
//! is dropped without an outcome, failed for the reason its owner gave at the start. This
//! is the only place request outcomes are counted, so no path can count one twice or
//! leave a request pending forever. Pending means queued, as Triton's
//! `nv_inference_pending_request_count`: it goes down once, when the request starts
//! executing or, if it never does, when the entry is closed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::measured::ComputeTiming;
use super::{FailureReason, ModelStats, StepTimes};

/// A request's open statistics entry.
#[derive(Debug)]
pub struct RequestRecord {
    /// `None` for requests that are never counted (sequence padding), and once closed.
    stats: Option<Arc<ModelStats>>,
    received_at: Instant,
    /// For a step of an ensemble request: where its queue and compute times are summed
    /// for the ensemble's statistics.
    step_times: Option<Arc<StepTimes>>,
    /// How the request counts if it is dropped unanswered.
    if_dropped: FailureReason,
    /// Still counted as pending (queued, not yet executing).
    queued: bool,
}

impl RequestRecord {
    /// Opens the entry of a request received at `received_at`. A request dropped without
    /// an outcome counts as failed for `if_dropped` (a job dropped by a scheduler was
    /// refused; an ensemble request whose caller left was cancelled).
    pub fn open(
        stats: Arc<ModelStats>,
        received_at: Instant,
        step_times: Option<Arc<StepTimes>>,
        if_dropped: FailureReason,
    ) -> Self {
        stats.request_started();
        Self {
            stats: Some(stats),
            received_at,
            step_times,
            if_dropped,
            queued: true,
        }
    }

    /// An entry that counts nothing: the sequence batcher's padding requests.
    pub fn untracked(received_at: Instant) -> Self {
        Self {
            stats: None,
            received_at,
            step_times: None,
            if_dropped: FailureReason::Other,
            queued: false,
        }
    }

    /// The request left its queue to execute: no longer pending.
    pub fn executing(&mut self) {
        if std::mem::take(&mut self.queued) {
            if let Some(stats) = &self.stats {
                stats.request_left_queue();
            }
        }
    }

    /// When the server received the request.
    pub fn received_at(&self) -> Instant {
        self.received_at
    }

    /// Closes the entry as a success that waited `queue` and computed for `timing`.
    pub fn succeeded(mut self, queue: Duration, timing: ComputeTiming) {
        self.executing();
        if let Some(stats) = self.stats.take() {
            stats.request_succeeded(self.received_at.elapsed(), queue, timing);
        }
        if let Some(times) = &self.step_times {
            times.add(queue, timing);
        }
    }

    /// Closes the entry as a failure for `reason`.
    pub fn failed(mut self, reason: FailureReason) {
        self.close_failed(reason);
    }

    fn close_failed(&mut self, reason: FailureReason) {
        self.executing();
        if let Some(stats) = self.stats.take() {
            stats.request_failed(self.received_at.elapsed(), reason);
        }
    }
}

impl Drop for RequestRecord {
    fn drop(&mut self) {
        self.close_failed(self.if_dropped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(stats: &ModelStats) -> u64 {
        stats.snapshot("m", 1).pending
    }

    #[test]
    fn each_record_closes_once() {
        let stats = Arc::new(ModelStats::default());
        let now = Instant::now();
        let open = || RequestRecord::open(stats.clone(), now, None, FailureReason::Rejected);
        let (mut a, b, c) = (open(), open(), open());
        assert_eq!(pending(&stats), 3);
        a.executing();
        a.executing();
        assert_eq!(pending(&stats), 2, "once per record");
        a.succeeded(Duration::from_nanos(5), ComputeTiming::default());
        b.failed(FailureReason::Backend);
        drop(c);
        let snapshot = stats.snapshot("m", 1);
        assert_eq!(snapshot.pending, 0);
        assert_eq!(snapshot.inference_stats.success.count, 1);
        let count = |reason| {
            let index = FailureReason::ALL.iter().position(|r| *r == reason);
            snapshot.failures[index.expect("known reason")]
        };
        assert_eq!(count(FailureReason::Backend), 1);
        assert_eq!(
            count(FailureReason::Rejected),
            1,
            "dropped: its owner's reason"
        );
    }

    #[test]
    fn a_step_adds_its_times_to_the_ensemble_sums() {
        let stats = Arc::new(ModelStats::default());
        let times = Arc::new(StepTimes::default());
        let step = RequestRecord::open(
            stats.clone(),
            Instant::now(),
            Some(times.clone()),
            FailureReason::Rejected,
        );
        let timing = ComputeTiming {
            infer_ns: 7,
            ..Default::default()
        };
        step.succeeded(Duration::from_nanos(3), timing);
        assert_eq!(times.totals(), (Duration::from_nanos(3), timing));
    }
}
