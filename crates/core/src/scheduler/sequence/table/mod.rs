//! The sequence batcher's bookkeeping, free of threads and timers so it can be tested
//! directly: which sequence owns which slot, the backlog of sequences waiting for a slot,
//! and which requests make up an instance's next batch.
//!
//! Slots are numbered per instance. Free slots are handed out lowest slot number first,
//! across instances (slot 0 of every instance before slot 1 of any), as in Triton, so new
//! sequences spread over the instances.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use self::hold::{Queued, SlotHolds};
use self::idle::IdleDeadlines;
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

#[derive(Debug)]
struct Backlogged {
    id: SequenceId,
    queue: VecDeque<Pending>,
    /// False once the END request arrived.
    open: bool,
}

/// IDs released by the idle timeout, remembered (boundedly) to explain later requests.
#[derive(Debug, Default)]
struct Expired {
    set: HashSet<SequenceId>,
    order: VecDeque<SequenceId>,
}

const EXPIRED_MEMORY: usize = 65_536;

/// The most requests the backlog holds, as the other schedulers' queues: each one is a
/// client waiting, and nothing else would bound them. Beyond it a request is refused at
/// once, as a full queue is elsewhere.
const MAX_BACKLOG_REQUESTS: usize = crate::scheduler::DEFAULT_QUEUE_CAPACITY;

impl Expired {
    fn insert(&mut self, id: SequenceId) {
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
    /// queues behind it in that slot, so two sequences with one ID never run at once:
    /// their state is keyed by ID (here and in a stateful backend), and a client may
    /// stream the next sequence before the previous one has run.
    ending: HashMap<SequenceId, usize>,
    backlog: VecDeque<Backlogged>,
    expired: Expired,
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
            idle: IdleDeadlines::default(),
            reaper_at: None,
            reaper_due: false,
            backend_state: None,
            holds: None,
        }
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
    fn holds(&mut self, instance: usize) -> bool {
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
                let slot = self.ending.get(&id).copied().or_else(|| {
                    let (slot, instance) = self.free.pop_first()?;
                    Some(instance * per_instance + slot)
                });
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
    fn full(&self) -> Error {
        Error::unavailable(format!(
            "Too many simultaneous connections: model '{}' holds the state of {} sequences per instance (max_candidate_sequences × max_candidate_sequence_use_ratio), all in use; retry when a sequence ends",
            self.model, self.per_instance
        ))
    }

    /// Triton's words first (its QA matches their start), then why, when Nereid knows.
    fn not_started(&self, id: &SequenceId) -> Error {
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
        Error::invalid_arg(triton)
    }

    /// Frees slot `index`, handing it to the oldest backlogged sequence if there is one.
    /// Returns the instances to wake.
    fn release(&mut self, index: usize) -> Vec<usize> {
        self.slots[index].owner = None;
        let mut wake = Vec::new();
        let next = loop {
            let Some(b) = self.backlog.pop_front() else {
                break None;
            };
            // A sequence whose predecessor with the same ID still drains joins its slot.
            match self.ending.get(&b.id).copied() {
                Some(draining) if draining != index => {
                    if let Some(active) = self.active.get_mut(&b.id) {
                        active.place = Place::Slot(draining);
                    }
                    if !b.open {
                        self.ending.insert(b.id.clone(), draining);
                    }
                    self.slots[draining].queue.extend(b.queue);
                    wake.push(draining / self.per_instance);
                }
                _ => break Some(b),
            }
        };
        match next {
            Some(b) => {
                if let Some(active) = self.active.get_mut(&b.id) {
                    active.place = Place::Slot(index);
                }
                if !b.open {
                    self.ending.insert(b.id.clone(), index);
                }
                let slot = &mut self.slots[index];
                slot.owner = Some(b.id);
                slot.queue.extend(b.queue);
                wake.push(index / self.per_instance);
                wake
            }
            None => {
                self.free
                    .insert((index % self.per_instance, index / self.per_instance));
                wake
            }
        }
    }

    /// An END left slot `index`: the slot is released unless the next sequence with the
    /// same ID queued behind it (see `ending`). Returns the instances to wake.
    fn ended(&mut self, index: usize, id: &SequenceId) -> Vec<usize> {
        let queue = &self.slots[index].queue;
        let another_end = queue.iter().any(|p| p.flags.end);
        let emptied = queue.is_empty();
        if !another_end && self.ending.get(id) == Some(&index) {
            self.ending.remove(id);
        }
        if emptied {
            self.release(index)
        } else {
            Vec::new()
        }
    }

    /// Ends sequences without a request for longer than the idle timeout (Triton sends the
    /// model nothing for them).
    pub fn reap(&mut self, now: Instant) -> Reaped {
        let mut reaped = Reaped::default();
        self.expire_backlog(now, &mut reaped);
        for id in self.idle.take_due(now) {
            // Only sequences in a slot with nothing queued are armed.
            let Some(Active { place, .. }) = self.active.remove(&id) else {
                continue;
            };
            tracing::debug!(sequence = %id, model = %self.model, "idle sequence released");
            self.expired.insert(id.clone());
            if let Place::Slot(index) = place {
                let instance = index / self.per_instance;
                if let Some(queue) = self
                    .backend_state
                    .as_mut()
                    .and_then(|r| r.get_mut(instance))
                {
                    queue.push(id.clone());
                    reaped.wake.push(instance);
                }
                reaped.wake.extend(self.release(index));
            }
            reaped.released.push(id);
        }
        reaped
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

    /// The next batch of `instance`, or how long to wait for one. Also returns the
    /// instances to wake because a slot freed here went to a backlogged sequence.
    pub fn next_round(&mut self, instance: usize, now: Instant) -> (Round, Vec<usize>) {
        let was_held = self.held().contains(&instance);
        if self.holds(instance) {
            return (Round::Wait(None), Vec::new());
        }
        if was_held {
            // Lifted just now: an instance still held may have counted this one's queue
            // as it was before and must look again (Triton's threads poll every 10 ms).
            let others = self.held();
            let (round, mut wake) = self.next_round(instance, now);
            wake.extend(others);
            return (round, wake);
        }
        let first = instance * self.per_instance;
        let heads: Vec<usize> = (first..first + self.per_instance)
            .filter(|&i| !self.slots[i].queue.is_empty())
            .collect();
        let Some(&oldest) = heads
            .iter()
            .min_by_key(|&&i| self.slots[i].queue[0].job.enqueued_at)
        else {
            return (Round::Wait(None), Vec::new());
        };
        let waited_since = self.slots[oldest].queue[0].job.enqueued_at;
        let (chosen, pad) = match &self.strategy {
            SequenceStrategy::Direct {
                minimum_slot_utilization,
                max_queue_delay,
            } => {
                let ready = heads.len() as f32 / self.max_batch as f32;
                let deadline = waited_since + *max_queue_delay;
                if *minimum_slot_utilization > 0.0
                    && ready < *minimum_slot_utilization
                    && now < deadline
                {
                    return (Round::Wait(Some(deadline)), Vec::new());
                }
                (heads, true)
            }
            SequenceStrategy::Oldest {
                preferred_batch_sizes,
                max_queue_delay,
                ..
            } => {
                let mut by_age = heads;
                let age = |&i: &usize| self.slots[i].queue[0].job.enqueued_at;
                // Only the batch's worth of oldest heads needs ordering: select, then sort
                // those (linear in the candidates, which may be thousands).
                if by_age.len() > self.max_batch {
                    by_age.select_nth_unstable_by_key(self.max_batch, age);
                    by_age.truncate(self.max_batch);
                }
                by_age.sort_by_key(age);
                let deadline = waited_since + *max_queue_delay;
                let full = by_age.len() == self.max_batch
                    || preferred_batch_sizes.contains(&by_age.len())
                    || max_queue_delay.is_zero();
                if !full && now < deadline {
                    return (Round::Wait(Some(deadline)), Vec::new());
                }
                (by_age, false)
            }
        };
        self.take(first, chosen, pad)
    }

    /// Pops the head of each chosen slot (requests whose input shapes differ from the
    /// first chosen one wait for a later round), padding gaps below the highest active
    /// slot when `pad`.
    fn take(&mut self, first: usize, chosen: Vec<usize>, pad: bool) -> (Round, Vec<usize>) {
        let shapes = |p: &Pending| -> Vec<Vec<i64>> {
            p.job
                .request
                .inputs
                .iter()
                .map(|i| i.shape.clone())
                .collect()
        };
        let reference = chosen.first().map(|&i| shapes(&self.slots[i].queue[0]));
        let chosen: Vec<usize> = chosen
            .into_iter()
            .filter(|&i| Some(shapes(&self.slots[i].queue[0])) == reference)
            .collect();
        let mut wake = Vec::new();
        let mut popped = Vec::with_capacity(chosen.len());
        for &index in &chosen {
            let Some(pending) = self.slots[index].queue.pop_front() else {
                continue;
            };
            if pending.flags.end {
                wake.extend(self.ended(index, &pending.flags.id));
            }
            popped.push((index, pending));
        }
        let entries = if pad {
            let last = chosen.iter().max().copied().unwrap_or(first);
            let mut by_slot: HashMap<usize, Pending> = popped.into_iter().collect();
            (first..=last).map(|i| by_slot.remove(&i)).collect()
        } else {
            popped.into_iter().map(|(_, p)| Some(p)).collect()
        };
        (Round::Ready(entries), wake)
    }

    /// The requests of `sequences` finished executing at `now`: each sequence with nothing
    /// more queued starts its idle clock, so a sequence is never released while its own
    /// request runs, however long that takes.
    pub fn executed(&mut self, sequences: &[SequenceId], now: Instant) {
        let at = now + self.idle_timeout;
        for id in sequences {
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
    fn expect_reaper_by(&mut self, at: Instant) {
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

    fn backlog_requests(&self) -> usize {
        self.backlog.iter().map(|b| b.queue.len()).sum()
    }

    /// Whether `instance` has requests queued in its slots.
    pub fn has_work(&self, instance: usize) -> bool {
        let first = instance * self.per_instance;
        self.slots[first..first + self.per_instance]
            .iter()
            .any(|s| !s.queue.is_empty())
    }

    /// Removes every backlogged request (at shutdown).
    pub fn drain_backlog(&mut self) -> Vec<Pending> {
        let drained: Vec<Pending> = self.backlog.drain(..).flat_map(|b| b.queue).collect();
        self.active.retain(|_, a| a.place != Place::Backlog);
        drained
    }

    /// Counts for the metrics.
    pub fn occupancy(&self) -> Occupancy {
        Occupancy {
            active: self.active.len() as u64,
            backlog: self.backlog.len() as u64,
            slots_used: self.slots.iter().filter(|s| s.owner.is_some()).count() as u64,
            slots_total: self.slots.len() as u64,
        }
    }
}

/// When a backlogged request's `timeout` (µs) passes, failing its sequence.
fn backlog_deadline(p: &Pending) -> Option<Instant> {
    p.job
        .request
        .u64_parameter("timeout")
        .filter(|t| *t > 0)
        .map(|t| p.job.enqueued_at + Duration::from_micros(t))
}

mod hold;
/// Requests queued in a slot behind its first END: a later sequence with the same ID.
fn behind_first_end(queue: &VecDeque<Pending>) -> usize {
    queue
        .iter()
        .position(|p| p.flags.end)
        .map_or(0, |end| queue.len() - end - 1)
}

#[cfg(test)]
mod hold_tests;
mod idle;
#[cfg(test)]
mod tests;
