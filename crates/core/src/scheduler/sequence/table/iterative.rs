//! Iterative sequences (`iterative_sequence`): one request is the whole sequence. Each
//! time the backend reschedules it, it queues again in its sequence's slot; when it
//! completes, its sequence ends and the slot is free, as after an END.

use super::{Pending, Place, Table};
use crate::sequence_flags::SequenceId;

impl Table {
    /// Queues the next execution of an active sequence's request in its slot (an
    /// iterative sequence whose request the backend rescheduled); gives the request
    /// back when its sequence holds no slot any more. Returns the instance to wake.
    pub fn requeue(&mut self, pending: Pending) -> std::result::Result<usize, Box<Pending>> {
        match self.active.get(&pending.flags.id).map(|a| a.place) {
            Some(Place::Slot(index)) => {
                self.slots[index].queue.push_back(pending);
                Ok(index / self.per_instance)
            }
            _ => Err(Box::new(pending)),
        }
    }

    /// Ends the iterative sequence `id` whose request completed, releasing its slot as
    /// an END would (unless more of its requests are queued there). Returns the
    /// instances to wake.
    pub fn finish(&mut self, id: &SequenceId) -> Vec<usize> {
        let Some(active) = self.active.get_mut(id) else {
            return Vec::new();
        };
        let Place::Slot(index) = active.place else {
            return Vec::new();
        };
        if !self.slots[index].queue.is_empty() {
            return Vec::new();
        }
        self.idle.disarm(&mut active.idle_at, id);
        self.active.remove(id);
        self.release(index)
    }
}
