//! The sequence batcher's bookkeeping, free of threads and timers so it can be tested
//! directly: which sequence owns which slot, the backlog of sequences waiting for a slot,
//! and which requests make up an instance's next batch.
//!
//! Slots are numbered per instance. Free slots are handed out lowest slot number first,
//! across instances (slot 0 of every instance before slot 1 of any), as in Triton, so new
//! sequences spread over the instances.
//!
//! Here: the slots, admission and the counts. Its seams, each an `impl Table` of its own:
//! [`backlog`] (sequences waiting for a slot, handed freed slots oldest first),
//! [`rounds`] (an instance's next batch under `direct` or `oldest`), [`reaping`] (idle
//! release and backlog timeouts, and when the reaper next looks), [`cancelled`]
//! (sequences whose client left before their request ran), [`iterative`] (a
//! rescheduled request queued again, a completed one ending its sequence), [`instances`]
//! (instances added and retired by an instance update); [`idle`] orders the idle
//! deadlines and [`hold`] is the test hooks' holds (of the instances the model loaded
//! with; an instance added later is never held).

mod backlog;
mod cancelled;
#[cfg(test)]
mod cancelled_tests;
mod hold;
#[cfg(test)]
mod hold_tests;
mod idle;
mod instances;
mod iterative;
mod reaping;
mod rounds;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use self::backlog::{backlog_deadline, behind_first_end, Backlogged, MAX_BACKLOG_REQUESTS};
pub use self::cancelled::{Cancelled, CALLER_CHECK};
use self::hold::{Queued, SlotHolds};
use self::idle::IdleDeadlines;
use self::reaping::Expired;
pub use self::reaping::Reaped;
use crate::error::{Error, Result};
use crate::model::SequenceStrategy;
use crate::scheduler::hold::Hooks;
use crate::scheduler::Job;
use crate::sequence_flags::{SequenceFlags, SequenceId};
use crate::stats::Occupancy;

/// A request waiting in a slot or in the backlog.
#[derive(Debug)]
pub struct Pending {
    /// The request.
    pub job: Job,
    /// Its sequence fields.
    pub flags: SequenceFlags,
}

/// What an instance should do next.
#[derive(Debug)]
pub enum Round {
    /// Execute these requests; `None` entries are padding for idle slots (direct).
    Ready(Vec<Option<Pending>>),
    /// Nothing to run yet; look again at the deadline or when woken.
    Wait(Option<Instant>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Slot(usize),
    Backlog,
}

#[derive(Debug)]
struct Active {
    place: Place,
    last_seen: Instant,
    /// Its key in [`Table::idle`], while its slot queue is empty.
    idle_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Slot {
    owner: Option<SequenceId>,
    queue: VecDeque<Pending>,
}

/// Slots, backlog and active sequences of one model version.
#[derive(Debug)]
pub struct Table {
    model: String,
    per_instance: usize,
    max_batch: usize,
    strategy: SequenceStrategy,
    idle_timeout: Duration,
    slots: Vec<Slot>,
    free: BTreeSet<(usize, usize)>,
    active: HashMap<SequenceId, Active>,
    /// Sequences whose END waits in a slot's queue, by slot. A new START of the same ID
    /// queues behind it in that slot (or, with no slot free, waits in the backlog until
    /// the END has left), so two sequences with one ID never run at once:
    /// their state is keyed by ID (here and in a stateful backend), and a client may
    /// stream the next sequence before the previous one has run.
    ending: HashMap<SequenceId, usize>,
    backlog: VecDeque<Backlogged>,
    expired: Expired,
    /// IDs of sequences cancelled because a client left, to explain later requests.
    cancelled_ids: Expired,
    /// Requests of cancelled sequences not yet answered (see [`Table::take_cancelled`]).
    cancelled: Cancelled,
    idle: IdleDeadlines,
    /// When the reaper will look next, as it last computed (`None`: only when woken).
    reaper_at: Option<Instant>,
    /// Set when a deadline earlier than `reaper_at` appeared; the batcher then wakes the
    /// reaper (see [`Table::take_reaper_due`]).
    reaper_due: bool,
    /// Set when the backend keeps each sequence's state itself (its capacity is the slot
    /// count): a START finding no free slot is refused instead of backlogged, and idle
    /// releases are queued per instance for the backend, see [`Table::take_releases`].
    backend_state: Option<Vec<Vec<SequenceId>>>,
    /// The test hooks' holds (`TRITONSERVER_DELAY_SCHEDULER`), when set.
    holds: Option<SlotHolds>,
    /// Inputs with `allow_ragged_batch`: their shapes may differ within a batch.
    ragged: Vec<String>,
    /// Instances an instance update removed (see [`instances`]).
    retired: BTreeSet<usize>,
}

impl Table {
    /// `instances` × `per_instance` slots; batches of at most `max_batch` requests.
    pub fn new(
        model: &str,
        instances: usize,
        per_instance: usize,
        max_batch: usize,
        strategy: SequenceStrategy,
        idle_timeout: Duration,
    ) -> Self {
        let free = (0..per_instance)
            .flat_map(|s| (0..instances).map(move |i| (s, i)))
            .collect();
        Self {
            model: model.to_string(),
            per_instance,
            max_batch: max_batch.max(1),
            strategy,
            idle_timeout,
            slots: (0..instances * per_instance)
                .map(|_| Slot::default())
                .collect(),
            free,
            active: HashMap::new(),
            ending: HashMap::new(),
            backlog: VecDeque::new(),
            expired: Expired::default(),
            cancelled_ids: Expired::default(),
            cancelled: Cancelled::default(),
            idle: IdleDeadlines::default(),
            reaper_at: None,
            reaper_due: false,
            backend_state: None,
            holds: None,
            ragged: Vec::new(),
            retired: BTreeSet::new(),
        }
    }

    /// The table of a model whose `ragged` inputs may differ in shape within a batch
    /// (every other input's shape must match for requests to share one).
    pub fn with_ragged_inputs(mut self, ragged: Vec<String>) -> Self {
        self.ragged = ragged;
        self
    }

    /// The table with the test hooks' holds (see [`hold`]).
    pub fn with_hooks(mut self, hooks: Hooks) -> Self {
        self.holds = SlotHolds::new(self.slots.len() / self.per_instance.max(1), hooks);
        self
    }

    /// Instances still held by a test hook; a new request may lift them.
    pub fn held(&self) -> Vec<usize> {
        self.holds.as_ref().map(SlotHolds::held).unwrap_or_default()
    }

    /// Lifts the test hooks' holds (at shutdown, so that queued requests drain).
    pub fn lift_holds(&mut self) {
        if let Some(holds) = &mut self.holds {
            holds.lift();
        }
    }

    /// Whether a test hook holds `instance` now (see [`hold`]).
    pub(super) fn holds(&mut self, instance: usize) -> bool {
        let Some(holds) = &mut self.holds else {
            return false;
        };
        let first = instance * self.per_instance;
        let slots = &self.slots[first..first + self.per_instance];
        // A sequence restarted behind its previous END waits in that slot's queue here;
        // Triton keeps it in the backlog, and its hooks count it there.
        let restarted: usize = self.slots.iter().map(|s| behind_first_end(&s.queue)).sum();
        let queued = Queued {
            requests: slots
                .iter()
                .map(|s| s.queue.len() - behind_first_end(&s.queue))
                .sum(),
            heads: slots.iter().filter(|s| !s.queue.is_empty()).count(),
            backlog: self.backlog.iter().map(|b| b.queue.len()).sum::<usize>() + restarted,
        };
        match self.strategy {
            SequenceStrategy::Direct { .. } => holds.direct_holds(instance, queued),
            SequenceStrategy::Oldest { .. } => holds.oldest_holds(instance, queued),
        }
    }

    /// The table of a model whose backend keeps sequence state (see `backend_state`).
    pub fn with_backend_state(mut self) -> Self {
        self.backend_state = Some(vec![
            Vec::new();
            self.slots.len() / self.per_instance.max(1)
        ]);
        self
    }

    /// Sequences released idle from `instance` since the last call, for its backend.
    pub fn take_releases(&mut self, instance: usize) -> Vec<SequenceId> {
        self.backend_state
            .as_mut()
            .and_then(|r| r.get_mut(instance))
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Takes a request in: into its sequence's slot or backlog queue, or a new place for a
    /// START. Returns the instance to wake, if any.
    pub fn admit(&mut self, pending: Pending, now: Instant) -> Result<Option<usize>> {
        let id = pending.flags.id.clone();
        let to_backlog = match self.active.get(&id) {
            Some(active) => active.place == Place::Backlog,
            None => self.free.is_empty() && self.backend_state.is_none(),
        };
        if to_backlog && self.backlog_requests() >= MAX_BACKLOG_REQUESTS {
            return Err(Error::unavailable("Exceeds maximum queue size"));
        }
        let place = match self.active.get_mut(&id) {
            Some(active) => {
                self.idle.disarm(&mut active.idle_at, &id);
                if pending.flags.start {
                    tracing::warn!(
                        "sequence {id} for model '{}' has a conflict. The previous sequence did not end before this sequence start. Previous sequence will be terminated early.",
                        self.model
                    );
                }
                active.last_seen = now;
                active.place
            }
            None if !pending.flags.start => return Err(self.not_started(&id)),
            None => {
                let per_instance = self.per_instance;
                // A restart joins the slot its predecessor drains while a slot is free;
                // with none free it waits in the backlog, as Triton's does, and takes the
                // first slot freed once the predecessor has left (see `release`).
                let draining = self.ending.get(&id).copied();
                let slot = match draining {
                    Some(index) if !self.free.is_empty() || self.backend_state.is_some() => {
                        Some(index)
                    }
                    Some(_) => None,
                    None => self
                        .free
                        .pop_first()
                        .map(|(slot, instance)| instance * per_instance + slot),
                };
                let place = match slot {
                    Some(index) => {
                        self.slots[index].owner = Some(id.clone());
                        Place::Slot(index)
                    }
                    None if self.backend_state.is_some() => return Err(self.full()),
                    None => {
                        self.backlog.push_back(Backlogged {
                            id: id.clone(),
                            queue: VecDeque::new(),
                            open: true,
                        });
                        Place::Backlog
                    }
                };
                self.expired.set.remove(&id);
                self.cancelled_ids.set.remove(&id);
                self.active.insert(
                    id.clone(),
                    Active {
                        place,
                        last_seen: now,
                        idle_at: None,
                    },
                );
                place
            }
        };
        if pending.flags.end {
            // Later requests with this ID need a new START.
            self.active.remove(&id);
        }
        match place {
            Place::Slot(index) => {
                if pending.flags.end {
                    self.ending.insert(id, index);
                }
                self.slots[index].queue.push_back(pending);
                Ok(Some(index / self.per_instance))
            }
            Place::Backlog => {
                let end = pending.flags.end;
                if let Some(timeout) = backlog_deadline(&pending) {
                    self.expect_reaper_by(timeout);
                }
                if let Some(b) = self.backlog.iter_mut().rev().find(|b| b.id == id && b.open) {
                    b.queue.push_back(pending);
                    b.open = !end;
                }
                Ok(None)
            }
        }
    }

    /// The refusal of a new sequence when every slot is taken and the backend keeps state.
    pub(super) fn full(&self) -> Error {
        Error::unavailable(format!(
            "Too many simultaneous connections: model '{}' holds the state of {} sequences per instance (max_candidate_sequences × max_candidate_sequence_use_ratio), all in use; retry when a sequence ends",
            self.model, self.per_instance
        ))
    }

    /// Triton's words first (its QA matches their start), then why, when Nereid knows.
    pub(super) fn not_started(&self, id: &SequenceId) -> Error {
        let triton = format!(
            "inference request for sequence {id} to model '{}' must specify the START flag on the first request of the sequence",
            self.model
        );
        if self.expired.set.contains(id) {
            return Error::invalid_arg(format!(
                "{triton}; it was released after {} µs without a request (max_sequence_idle_microseconds)",
                self.idle_timeout.as_micros()
            ));
        }
        if self.cancelled_ids.set.contains(id) {
            return Error::invalid_arg(format!(
                "{triton}; it was cancelled: the client of one of its requests went away before the request ran"
            ));
        }
        Error::invalid_arg(triton)
    }

    /// Counts for the metrics.
    pub fn occupancy(&self) -> Occupancy {
        Occupancy {
            active: self.active.len() as u64,
            backlog: self.backlog.len() as u64,
            slots_used: self.slots.iter().filter(|s| s.owner.is_some()).count() as u64,
            // A retired instance's slots count while a sequence holds them.
            slots_total: (0..self.slots.len())
                .filter(|&i| self.slots[i].owner.is_some() || !self.of_retired(i))
                .count() as u64,
        }
    }
}
