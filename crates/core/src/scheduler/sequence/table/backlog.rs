//! The backlog: sequences waiting for a slot, in arrival order. A freed slot goes to the
//! oldest of them; a backlogged request whose `timeout` passes fails its whole sequence;
//! at shutdown the backlog drains. Bounded like the other schedulers' queues.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Pending, Place, Table};
use crate::sequence_flags::SequenceId;

/// The most requests the backlog holds, as the other schedulers' queues: each one is a
/// client waiting, and nothing else would bound them. Beyond it a request is refused at
/// once, as a full queue is elsewhere.
pub(super) const MAX_BACKLOG_REQUESTS: usize = crate::scheduler::DEFAULT_QUEUE_CAPACITY;

#[derive(Debug)]
pub(super) struct Backlogged {
    pub(super) id: SequenceId,
    pub(super) queue: VecDeque<Pending>,
    /// False once the END request arrived.
    pub(super) open: bool,
}

impl Table {
    /// Frees slot `index`, handing it to the oldest backlogged sequence if there is one
    /// (a retired instance's slot goes to nobody: the instance is woken to see whether it
    /// is finished). Returns the instances to wake.
    pub(super) fn release(&mut self, index: usize) -> Vec<usize> {
        self.slots[index].owner = None;
        if self.of_retired(index) {
            return vec![index / self.per_instance];
        }
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

    /// ENDs left their slots (slot, ID) in one round: each slot is released unless the
    /// next sequence with the same ID queued behind it (see `ending`). Returns the
    /// instances to wake.
    pub(super) fn ended(&mut self, ended: &[(usize, &SequenceId)]) -> Vec<usize> {
        for &(index, id) in ended {
            let another_end = self.slots[index].queue.iter().any(|p| p.flags.end);
            if !another_end && self.ending.get(id) == Some(&index) {
                self.ending.remove(id);
            }
        }
        let mut wake = Vec::new();
        for &(index, _) in ended {
            if self.slots[index].queue.is_empty() {
                wake.extend(self.release(index));
            }
        }
        wake
    }

    pub(super) fn backlog_requests(&self) -> usize {
        self.backlog.iter().map(|b| b.queue.len()).sum()
    }

    /// Removes every backlogged request (at shutdown).
    pub fn drain_backlog(&mut self) -> Vec<Pending> {
        let drained: Vec<Pending> = self.backlog.drain(..).flat_map(|b| b.queue).collect();
        self.active.retain(|_, a| a.place != Place::Backlog);
        drained
    }
}

/// When a backlogged request's `timeout` (µs) passes, failing its sequence.
pub(super) fn backlog_deadline(p: &Pending) -> Option<Instant> {
    p.job
        .request
        .u64_parameter("timeout")
        .filter(|t| *t > 0)
        .map(|t| p.job.enqueued_at + Duration::from_micros(t))
}

/// Requests queued in a slot behind its first END: a later sequence with the same ID.
pub(super) fn behind_first_end(queue: &VecDeque<Pending>) -> usize {
    queue
        .iter()
        .position(|p| p.flags.end)
        .map_or(0, |end| queue.len() - end - 1)
}
