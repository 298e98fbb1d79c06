//! When each idle sequence is due for release, ordered by time, so the reaper finds what is
//! due without scanning every active sequence and knows exactly how long to sleep.
//!
//! A sequence is armed when its last request finished executing and nothing more is queued
//! for it (a sequence with a request queued or running is never idle), and disarmed when
//! a request for it arrives or it leaves its slot.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::sequence_flags::SequenceId;

/// Idle deadlines of the sequences whose slot queue is empty.
#[derive(Debug, Default)]
pub(super) struct IdleDeadlines {
    by_time: BTreeSet<(Instant, SequenceId)>,
}

impl IdleDeadlines {
    /// Sets `id`'s deadline to `at`; `armed` is the sequence's current one, if any.
    pub fn arm(&mut self, armed: &mut Option<Instant>, id: &SequenceId, at: Instant) {
        self.disarm(armed, id);
        self.by_time.insert((at, id.clone()));
        *armed = Some(at);
    }

    /// Removes `id`'s deadline, if it has one.
    pub fn disarm(&mut self, armed: &mut Option<Instant>, id: &SequenceId) {
        if let Some(at) = armed.take() {
            self.by_time.remove(&(at, id.clone()));
        }
    }

    /// Takes out the sequences due at `now`, earliest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<SequenceId> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.by_time.first() {
            if *at > now {
                break;
            }
            if let Some((_, id)) = self.by_time.pop_first() {
                due.push(id);
            }
        }
        due
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.by_time.first().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn deadlines_come_out_in_time_order_and_rearming_moves_them() {
        let now = Instant::now();
        let ms = |n| now + Duration::from_millis(n);
        let mut idle = IdleDeadlines::default();
        let (mut a, mut b, mut c) = (None, None, None);
        let id = SequenceId::Number;
        idle.arm(&mut a, &id(1), ms(30));
        idle.arm(&mut b, &id(2), ms(10));
        idle.arm(&mut c, &id(3), ms(20));
        assert_eq!(idle.next(), Some(ms(10)));
        idle.arm(&mut b, &id(2), ms(40));
        idle.disarm(&mut c, &id(3));
        assert_eq!(c, None);
        assert_eq!(idle.take_due(ms(5)), vec![]);
        assert_eq!(idle.take_due(ms(35)), vec![id(1)]);
        assert_eq!(idle.next(), Some(ms(40)));
        assert_eq!(idle.take_due(ms(40)), vec![id(2)]);
        assert_eq!(idle.next(), None);
    }
}
