//! Idle release: a sequence whose slot queue stays empty past `max_sequence_idle_microseconds`
//! (counted from when its last request finished executing) is released, its ID
//! remembered to explain a later request; the reaper sleeps until the earliest deadline,
//! of an idle sequence or a backlogged request's `timeout`.

use std::collections::{HashSet, VecDeque};
use std::time::Instant;

use super::backlog::backlog_deadline;
use super::{Active, Pending, Place, Table};
use crate::sequence_flags::SequenceId;

/// What [`Table::reap`] did.
#[derive(Debug, Default)]
pub struct Reaped {
    /// Sequences released.
    pub released: Vec<SequenceId>,
    /// Requests of backlogged sequences whose `timeout` expired before they got a slot.
    pub timed_out: Vec<Pending>,
    /// Instances to wake (a backlogged sequence moved into a freed slot).
    pub wake: Vec<usize>,
}

/// IDs released by the idle timeout, remembered (boundedly) to explain later requests.
#[derive(Debug, Default)]
pub(super) struct Expired {
    pub(super) set: HashSet<SequenceId>,
    order: VecDeque<SequenceId>,
}

const EXPIRED_MEMORY: usize = 65_536;

impl Expired {
    pub(super) fn insert(&mut self, id: SequenceId) {
        if self.set.insert(id.clone()) {
            self.order.push_back(id);
            if self.order.len() > EXPIRED_MEMORY {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

impl Table {
    /// Ends sequences without a request for longer than the idle timeout (Triton sends the
    /// model nothing for them), and backlogged sequences whose client left (their requests
    /// wait in [`Table::take_cancelled`]).
    pub fn reap(&mut self, now: Instant) -> Reaped {
        let mut reaped = Reaped::default();
        self.expire_backlog(now, &mut reaped);
        self.cancel_left_backlog();
        for id in self.idle.take_due(now) {
            // Only sequences in a slot with nothing queued are armed.
            let Some(Active { place, .. }) = self.active.remove(&id) else {
                continue;
            };
            tracing::debug!(sequence = %id, model = %self.model, "idle sequence released");
            self.expired.insert(id.clone());
            if let Place::Slot(index) = place {
                self.forget_in_backend(index / self.per_instance, &id, &mut reaped.wake);
                reaped.wake.extend(self.release(index));
            }
            reaped.released.push(id);
        }
        reaped
    }

    /// The requests of `sequences` finished executing at `now`: each sequence with nothing
    /// more queued starts its idle clock, so a sequence is never released while its own
    /// request runs, however long that takes. A sequence whose request's caller left
    /// (`true` beside its ID) is due at once: the reaper ends it as an idle release would,
    /// instead of holding its slot and state for a client that is gone.
    pub fn executed(&mut self, sequences: &[(SequenceId, bool)], now: Instant) {
        for (id, caller_left) in sequences {
            let at = if *caller_left {
                now
            } else {
                now + self.idle_timeout
            };
            let Some(active) = self.active.get_mut(id) else {
                continue; // ended, or released meanwhile
            };
            let Place::Slot(index) = active.place else {
                continue;
            };
            if self.slots[index].queue.is_empty() {
                self.idle.arm(&mut active.idle_at, id, at);
                self.expect_reaper_by(at);
            }
        }
    }

    /// Notes that [`Self::reap`] has something to do at `at`.
    pub(super) fn expect_reaper_by(&mut self, at: Instant) {
        if self.reaper_at.is_none_or(|planned| at < planned) {
            self.reaper_at = Some(at);
            self.reaper_due = true;
        }
    }

    /// Whether the reaper must be woken because something is due before it planned to
    /// look; clears the flag.
    pub fn take_reaper_due(&mut self) -> bool {
        std::mem::take(&mut self.reaper_due)
    }

    /// The earliest moment [`Self::reap`] has something to do (`None`: nothing until the
    /// table changes); the reaper sleeps until then. Scans the backlog, which is bounded.
    pub fn next_reap(&mut self) -> Option<Instant> {
        let backlog = self
            .backlog
            .iter()
            .flat_map(|b| &b.queue)
            .filter_map(backlog_deadline)
            .min();
        self.reaper_at = match (self.idle.next(), backlog) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.reaper_due = false;
        self.reaper_at
    }

    /// Drops backlogged sequences with a request whose `timeout` (µs) has passed, as
    /// Triton does: the whole backlogged sequence fails.
    fn expire_backlog(&mut self, now: Instant, reaped: &mut Reaped) {
        let late = |p: &Pending| backlog_deadline(p).is_some_and(|at| now >= at);
        let mut kept = VecDeque::with_capacity(self.backlog.len());
        for b in self.backlog.drain(..) {
            if b.queue.iter().any(late) {
                if b.open {
                    self.active.remove(&b.id);
                }
                reaped.released.push(b.id);
                reaped.timed_out.extend(b.queue);
            } else {
                kept.push_back(b);
            }
        }
        self.backlog = kept;
    }
}
