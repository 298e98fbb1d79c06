//! Instances added and retired while the model serves (Triton's instance update of a
//! sequence-batched model, core `sequence_batch_scheduler.cc` `Update`): an added
//! instance brings its slots, which the backlog takes first; a retired instance takes no
//! new sequence, keeps serving those it holds until they end or are released idle, and
//! is finished once its last slot is free. Instance numbers are never reused, so a slot
//! keeps its index for as long as a sequence may hold it.

use super::Table;

impl Table {
    /// Adds an instance with `per_instance` free slots, handed to backlogged sequences
    /// first. Returns its number and the instances to wake (itself, when the backlog
    /// gave it work).
    pub fn add_instance(&mut self) -> (usize, Vec<usize>) {
        let instance = self.slots.len() / self.per_instance;
        let first = self.slots.len();
        self.slots
            .extend((0..self.per_instance).map(|_| super::Slot::default()));
        if let Some(releases) = &mut self.backend_state {
            releases.push(Vec::new());
        }
        let mut wake = Vec::new();
        for index in first..first + self.per_instance {
            wake.extend(self.release(index));
        }
        (instance, wake)
    }

    /// Retires `instance`: its free slots are withdrawn and the slots its sequences hold
    /// are not handed on when they free.
    pub fn retire_instance(&mut self, instance: usize) {
        self.retired.insert(instance);
        self.free.retain(|&(_, i)| i != instance);
    }

    /// Whether an instance update retired `instance`.
    pub fn is_retired(&self, instance: usize) -> bool {
        self.retired.contains(&instance)
    }

    /// Whether `instance` was retired and holds no sequence and no request: its
    /// dispatcher may stop and the instance be finalized.
    pub fn finished(&self, instance: usize) -> bool {
        let first = instance * self.per_instance;
        self.is_retired(instance)
            && self
                .slots
                .get(first..first + self.per_instance)
                .is_none_or(|slots| {
                    slots
                        .iter()
                        .all(|s| s.owner.is_none() && s.queue.is_empty())
                })
    }

    /// Whether slot `index` belongs to a retired instance.
    pub(super) fn of_retired(&self, index: usize) -> bool {
        self.is_retired(index / self.per_instance)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::tests::{direct, ids, pending};
    use super::*;

    #[test]
    fn an_added_instance_takes_the_backlog_first_then_new_sequences() {
        let now = Instant::now();
        let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(1));
        assert_eq!(
            t.admit(pending(1, true, false, now), now).expect("1"),
            Some(0)
        );
        assert_eq!(t.admit(pending(2, true, false, now), now).expect("2"), None);
        let (instance, wake) = t.add_instance();
        assert_eq!((instance, wake), (1, vec![1]));
        assert_eq!(ids(t.next_round(1, now).0), vec![Some(2)]);
        // The added instance's one slot is taken: the next START waits again.
        assert_eq!(t.admit(pending(3, true, false, now), now).expect("3"), None);
        assert_eq!(t.occupancy().slots_total, 2);
    }

    #[test]
    fn a_retired_instance_serves_its_sequences_to_their_end_and_takes_no_new_one() {
        let now = Instant::now();
        let mut t = Table::new("m", 2, 1, 1, direct(), Duration::from_secs(1));
        assert_eq!(
            t.admit(pending(1, true, false, now), now).expect("1"),
            Some(0)
        );
        ids(t.next_round(0, now).0);
        t.retire_instance(0);
        t.retire_instance(1);
        // Instance 1 held nothing: finished at once. Instance 0 holds sequence 1.
        assert!(t.finished(1));
        assert!(!t.finished(0));
        let (added, _) = t.add_instance();
        assert_eq!(added, 2);
        assert_eq!(
            t.admit(pending(2, true, false, now), now).expect("2"),
            Some(2)
        );
        // A third sequence finds no slot: the retired instance's slots are not offered.
        assert_eq!(t.admit(pending(3, true, false, now), now).expect("3"), None);
        // Sequence 1 goes on on its instance and ends there; its slot goes to nobody.
        assert_eq!(
            t.admit(pending(1, false, true, now), now).expect("end"),
            Some(0)
        );
        let (round, wake) = t.next_round(0, now);
        assert_eq!(ids(round), vec![Some(1)]);
        assert_eq!(wake, vec![0]);
        assert!(t.finished(0));
        assert_eq!(t.occupancy().slots_total, 1);
        assert_eq!(t.occupancy().backlog, 1);
    }
}
