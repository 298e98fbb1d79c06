//! Batch formation: which slots' head requests make an instance's next batch, under the
//! `direct` strategy (every ready slot, idle ones below padded) or `oldest` (the oldest
//! heads, up to the batch size or a preferred size), and when to wait instead.

use std::collections::HashMap;
use std::time::Instant;

use super::{Pending, Round, Table};
use crate::model::SequenceStrategy;
use crate::sequence_flags::SequenceId;

impl Table {
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
    /// first chosen one, ragged inputs aside, wait for a later round), padding every
    /// slot up to the highest chosen one that is not taken when `pad`.
    pub(super) fn take(
        &mut self,
        first: usize,
        chosen: Vec<usize>,
        pad: bool,
    ) -> (Round, Vec<usize>) {
        let shapes = |p: &Pending| -> Vec<Vec<i64>> {
            p.job
                .request
                .inputs
                .iter()
                .filter(|i| !self.ragged.contains(&i.name))
                .map(|i| i.shape.clone())
                .collect()
        };
        // Direct rounds pad up to the highest slot with a request queued, even when that
        // request waits for a later round (Triton's `max_seq_slot`).
        let last = chosen.iter().max().copied().unwrap_or(first);
        let reference = chosen.first().map(|&i| shapes(&self.slots[i].queue[0]));
        let chosen: Vec<usize> = chosen
            .into_iter()
            .filter(|&i| Some(shapes(&self.slots[i].queue[0])) == reference)
            .collect();
        let mut popped = Vec::with_capacity(chosen.len());
        for &index in &chosen {
            if let Some(pending) = self.slots[index].queue.pop_front() {
                popped.push((index, pending));
            }
        }
        // Every END of the round leaves before any slot is handed on: a backlogged
        // restart of an ID ending in this round may take any freed slot of this instance,
        // whose batches run one after another (Triton hands it the first slot freed).
        let ended: Vec<(usize, &SequenceId)> = popped
            .iter()
            .filter(|(_, p)| p.flags.end)
            .map(|(index, p)| (*index, &p.flags.id))
            .collect();
        let wake = self.ended(&ended);
        let entries = if pad {
            let mut by_slot: HashMap<usize, Pending> = popped.into_iter().collect();
            (first..=last).map(|i| by_slot.remove(&i)).collect()
        } else {
            popped.into_iter().map(|(_, p)| Some(p)).collect()
        };
        (Round::Ready(entries), wake)
    }

    /// Whether `instance` has requests queued in its slots.
    pub fn has_work(&self, instance: usize) -> bool {
        let first = instance * self.per_instance;
        self.slots[first..first + self.per_instance]
            .iter()
            .any(|s| !s.queue.is_empty())
    }
}
