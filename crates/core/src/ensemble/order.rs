//! The order of one sequence's requests through an ensemble's steps.
//!
//! A client may stream a sequence's requests without waiting for answers: START, then
//! the next, then END, all in flight at once. Each reaches the ensemble in order, and so
//! its first steps, but a later step is submitted when the step before it answers, and
//! two requests' answers may be handled in either order — a later request of the
//! sequence would then reach a sequence model before its START and be refused. Triton
//! submits the next step from the answering backend's own thread, which keeps the order
//! as long as the step's model answers in order; here the order is kept by rule: each
//! request of a sequence takes a ticket when it starts, and submits each step only after
//! every earlier ticket of the same sequence has submitted that step (or will never:
//! a request that fails or is dropped gives up its turns).
//!
//! Only ensembles without decoupled steps are ordered: a decoupled step's responses
//! start downstream steps any number of times, and there is no one turn to wait for.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::sequence_flags::SequenceId;

/// The tickets of every sequence with requests in flight through one ensemble.
#[derive(Debug)]
pub(super) struct SequenceOrder {
    steps: usize,
    sequences: Mutex<HashMap<SequenceId, Turns>>,
}

/// One sequence's tickets: how many were given out, and each step's turn.
#[derive(Debug)]
struct Turns {
    issued: u64,
    steps: Vec<StepTurn>,
}

/// Whose turn it is at one step.
#[derive(Debug, Default)]
struct StepTurn {
    /// The lowest ticket that has not passed this step.
    next: u64,
    /// Tickets above `next` that passed already (gave up their turn out of order).
    passed: BTreeSet<u64>,
    /// Requests waiting for their turn here, woken when `next` moves.
    waiting: Vec<Arc<Notify>>,
}

impl StepTurn {
    /// Marks `ticket` passed; returns whether the turn moved on.
    fn pass(&mut self, ticket: u64) -> bool {
        if ticket != self.next {
            self.passed.insert(ticket);
            return false;
        }
        self.next += 1;
        while self.passed.remove(&self.next) {
            self.next += 1;
        }
        for waiter in self.waiting.drain(..) {
            waiter.notify_one();
        }
        true
    }
}

impl SequenceOrder {
    /// The order for an ensemble of `steps` steps.
    pub(super) fn new(steps: usize) -> Self {
        Self {
            steps,
            sequences: Mutex::new(HashMap::new()),
        }
    }

    /// A ticket for the next request of sequence `id`, which must be taken in the order
    /// the requests arrive.
    pub(super) fn ticket(self: &Arc<Self>, id: SequenceId) -> Ticket {
        let mut sequences = self.lock();
        let turns = sequences.entry(id.clone()).or_insert_with(|| Turns {
            issued: 0,
            steps: (0..self.steps).map(|_| StepTurn::default()).collect(),
        });
        let number = turns.issued;
        turns.issued += 1;
        Ticket {
            order: self.clone(),
            id,
            number,
            passed: vec![false; self.steps],
            wake: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SequenceId, Turns>> {
        // The map stays consistent at every unlock, so a panic elsewhere cannot poison
        // what it means.
        self.sequences.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the `steps` of ticket `number` of `id` passed, forgetting the sequence once
    /// every ticket given out has passed every step.
    fn pass(&self, id: &SequenceId, number: u64, steps: impl Iterator<Item = usize>) {
        let mut sequences = self.lock();
        let Some(turns) = sequences.get_mut(id) else {
            return;
        };
        for step in steps {
            if let Some(turn) = turns.steps.get_mut(step) {
                turn.pass(number);
            }
        }
        if turns.steps.iter().all(|t| t.next == turns.issued) {
            sequences.remove(id);
        }
    }
}

/// One request's place in its sequence's order. Dropping it gives up every turn it has
/// not taken, so later requests never wait on one that will not come.
#[derive(Debug)]
pub(super) struct Ticket {
    order: Arc<SequenceOrder>,
    id: SequenceId,
    number: u64,
    passed: Vec<bool>,
    wake: Arc<Notify>,
}

impl Ticket {
    /// Takes this request's turn at `step` if it has come (the caller then submits the
    /// step); otherwise the request is woken through [`Ticket::woken`] when it may look
    /// again.
    pub(super) fn take_turn(&mut self, step: usize) -> bool {
        if self.passed.get(step).copied().unwrap_or(true) {
            return true;
        }
        let mut sequences = self.order.lock();
        let Some(turn) = sequences
            .get_mut(&self.id)
            .and_then(|t| t.steps.get_mut(step))
        else {
            return true;
        };
        if turn.next != self.number {
            turn.waiting.push(self.wake.clone());
            return false;
        }
        drop(sequences);
        self.passed[step] = true;
        self.order
            .pass(&self.id, self.number, std::iter::once(step));
        true
    }

    /// Resolves when an earlier request passed a step this one waits at (or spuriously).
    pub(super) fn woken(&self) -> Arc<Notify> {
        self.wake.clone()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let left = self
            .passed
            .iter()
            .enumerate()
            .filter(|(_, passed)| !**passed)
            .map(|(step, _)| step);
        self.order.pass(&self.id, self.number, left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(steps: usize) -> Arc<SequenceOrder> {
        Arc::new(SequenceOrder::new(steps))
    }

    #[test]
    fn a_later_request_waits_for_the_earlier_at_each_step() {
        let order = order(2);
        let mut first = order.ticket(SequenceId::Number(7));
        let mut second = order.ticket(SequenceId::Number(7));
        let mut other = order.ticket(SequenceId::Number(8));
        assert!(first.take_turn(0) && second.take_turn(0));
        // The second request's step 0 answered first: its step 1 waits.
        assert!(!second.take_turn(1));
        assert!(other.take_turn(1), "another sequence is not held back");
        assert!(first.take_turn(1));
        assert!(second.take_turn(1));
    }

    #[tokio::test]
    async fn a_dropped_request_gives_up_its_turns_and_wakes_the_next() {
        let order = order(2);
        let first = order.ticket(SequenceId::Number(7));
        let mut second = order.ticket(SequenceId::Number(7));
        assert!(!second.take_turn(1));
        let wake = second.woken();
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(5), wake.notified())
            .await
            .expect("woken");
        assert!(second.take_turn(1));
        drop(second);
        assert!(order.lock().is_empty(), "a finished sequence is forgotten");
    }

    #[test]
    fn turns_given_up_out_of_order_move_the_turn_past_them() {
        let order = order(1);
        let first = order.ticket(SequenceId::Number(7));
        let second = order.ticket(SequenceId::Number(7));
        let mut third = order.ticket(SequenceId::Number(7));
        drop(second);
        assert!(!third.take_turn(0));
        drop(first);
        assert!(third.take_turn(0));
    }
}
