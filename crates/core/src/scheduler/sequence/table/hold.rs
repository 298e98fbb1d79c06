//! The sequence batcher's test-hook holds (see [`crate::scheduler::hold`]): one per
//! instance, as Triton has one batcher thread per instance, each lifted on its own.
//!
//! - direct: an instance is held until the requests queued in the slots of all instances
//!   reach `TRITONSERVER_DELAY_SCHEDULER` and, when `TRITONSERVER_BACKLOG_DELAY_SCHEDULER`
//!   is set, the backlog holds that many requests. Like Triton's `DelayScheduler`, the
//!   count of an instance is the one it last looked at: an instance already lifted keeps
//!   counting with what it had queued when it was lifted.
//! - oldest: each instance runs Triton's dynamic batcher over the heads of its own slots,
//!   so it is held until that many of its slots have a request; the backlog is ignored.

use crate::scheduler::hold::{Hold, Hooks};

/// The holds of every instance.
#[derive(Debug)]
pub(super) struct SlotHolds {
    holds: Vec<Hold>,
    /// Each instance's queued count as it last looked (frozen once it was lifted).
    seen: Vec<usize>,
    backlog: usize,
}

/// What an instance sees when it looks for its next batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Queued {
    /// Requests queued in its slots.
    pub requests: usize,
    /// Its slots with a request waiting.
    pub heads: usize,
    /// Requests waiting in the backlog.
    pub backlog: usize,
}

impl SlotHolds {
    /// Holds for `instances` instances, or `None` when the hooks hold nothing.
    pub fn new(instances: usize, hooks: Hooks) -> Option<Self> {
        (hooks.queued > 0).then(|| Self {
            holds: vec![Hold::until(hooks.queued); instances],
            seen: vec![0; instances],
            backlog: hooks.backlog,
        })
    }

    /// Whether the direct strategy's `instance` must keep waiting, given what it sees.
    pub fn direct_holds(&mut self, instance: usize, queued: Queued) -> bool {
        let Some(hold) = self.holds.get_mut(instance) else {
            return false;
        };
        if !hold.is_held() {
            return false;
        }
        if let Some(seen) = self.seen.get_mut(instance) {
            *seen = queued.requests;
        }
        let total: usize = self.seen.iter().sum();
        let backlog_reached = self.backlog == 0 || queued.backlog >= self.backlog;
        hold.holds(|n| total >= n && backlog_reached)
    }

    /// Whether the oldest strategy's `instance` must keep waiting, given what it sees.
    pub fn oldest_holds(&mut self, instance: usize, queued: Queued) -> bool {
        self.holds
            .get_mut(instance)
            .is_some_and(|hold| hold.holds(|n| queued.heads >= n))
    }

    /// Instances still held: a new request may lift them, so they must look again.
    pub fn held(&self) -> Vec<usize> {
        (0..self.holds.len())
            .filter(|&i| self.holds[i].is_held())
            .collect()
    }

    /// Lifts every hold (the batcher is stopping: what is queued must drain).
    pub fn lift(&mut self) {
        self.holds.iter_mut().for_each(Hold::lift);
    }
}
