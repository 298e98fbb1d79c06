//! Sequences whose client went away before a request of theirs ran. Triton's batcher
//! ends such a sequence when the cancelled request reaches the head of its slot: the
//! slot is released and every request queued for the sequence is answered CANCELLED
//! (core `sequence_batch_scheduler.cc`, `IsCancelled` in the batcher thread); a
//! backlogged sequence holding a cancelled request is cancelled whole. Here the head of
//! a slot is looked at whenever its instance forms a round, and the backlog whenever the
//! reaper looks ([`CALLER_CHECK`] at the latest while sequences wait there), so a
//! backlogged sequence does not hold its clients until a slot frees.

use std::time::Duration;

use super::{Pending, Place, Table};
use crate::sequence_flags::SequenceId;

/// How often the reaper looks at the backlogged requests' callers while any wait: a
/// caller's departure sets a flag and wakes nothing.
pub const CALLER_CHECK: Duration = Duration::from_millis(250);

/// Requests taken out because their sequence was cancelled, to be answered CANCELLED
/// outside the table's lock, and the sequences ended.
#[derive(Debug, Default)]
pub struct Cancelled {
    /// The requests.
    pub requests: Vec<Pending>,
    /// The sequences ended (their kept state is forgotten).
    pub sequences: Vec<SequenceId>,
}

impl Table {
    /// Ends the sequences of `instance` whose next request's caller left before it ran:
    /// that request and the rest of its sequence's requests in the slot go to
    /// `cancelled`; the slot is freed for the backlog. A sequence restarted with the same
    /// ID behind the cancelled one's END keeps its place. Returns the instances to wake.
    pub fn cancel_left_heads(&mut self, instance: usize) -> Vec<usize> {
        let first = instance * self.per_instance;
        let mut wake = Vec::new();
        for index in first..first + self.per_instance {
            let queue = &mut self.slots[index].queue;
            if !queue.front().is_some_and(|head| head.job.caller_left()) {
                continue;
            }
            let through = queue
                .iter()
                .position(|p| p.flags.end)
                .map_or(queue.len(), |end| end + 1);
            let taken: Vec<Pending> = queue.drain(..through).collect();
            let Some(id) = taken.first().map(|p| p.flags.id.clone()) else {
                continue;
            };
            let ended = taken.last().is_some_and(|p| p.flags.end);
            tracing::debug!(sequence = %id, model = %self.model, "sequence cancelled: a client left before its request ran");
            self.forget_in_backend(instance, &id, &mut wake);
            self.cancelled.requests.extend(taken);
            self.cancelled.sequences.push(id.clone());
            self.cancelled_ids.insert(id.clone());
            if ended {
                // The END's admission already ended the sequence; a restart may follow.
                wake.extend(self.ended(&[(index, &id)]));
            } else if let Some(mut active) = self.active.remove(&id) {
                self.idle.disarm(&mut active.idle_at, &id);
                wake.extend(self.release(index));
            }
        }
        wake
    }

    /// Ends every backlogged sequence with a request whose caller left: all its
    /// requests go to `cancelled`.
    pub(super) fn cancel_left_backlog(&mut self) {
        if !self
            .backlog
            .iter()
            .any(|b| b.queue.iter().any(|p| p.job.caller_left()))
        {
            return;
        }
        for b in std::mem::take(&mut self.backlog) {
            if !b.queue.iter().any(|p| p.job.caller_left()) {
                self.backlog.push_back(b);
                continue;
            }
            tracing::debug!(sequence = %b.id, model = %self.model, "backlogged sequence cancelled: a client left");
            if b.open
                && self
                    .active
                    .get(&b.id)
                    .is_some_and(|a| a.place == Place::Backlog)
            {
                self.active.remove(&b.id);
            }
            self.cancelled_ids.insert(b.id.clone());
            self.cancelled.requests.extend(b.queue);
            self.cancelled.sequences.push(b.id);
        }
    }

    /// Whether sequences wait in the backlog (the reaper then looks at their callers).
    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// The requests of cancelled sequences since the last call, to answer CANCELLED.
    pub fn take_cancelled(&mut self) -> Cancelled {
        std::mem::take(&mut self.cancelled)
    }

    /// Queues `id`'s release for `instance`'s backend when the backend keeps sequence
    /// state itself (the sequence's END will never reach it).
    pub(super) fn forget_in_backend(
        &mut self,
        instance: usize,
        id: &SequenceId,
        wake: &mut Vec<usize>,
    ) {
        if let Some(queue) = self
            .backend_state
            .as_mut()
            .and_then(|r| r.get_mut(instance))
        {
            queue.push(id.clone());
            wake.push(instance);
        }
    }
}
