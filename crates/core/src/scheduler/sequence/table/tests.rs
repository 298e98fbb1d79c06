use std::time::{Duration, Instant};

use super::*;
use crate::request::InferRequest;
use crate::testing;

/// A request of sequence `id` whose caller waits (its answer is never read: the receiver
/// is leaked so the caller never counts as gone).
pub(super) fn pending(id: u64, start: bool, end: bool, at: Instant) -> Pending {
    let (pending, answer) = pending_with_answer(id, start, end, at);
    std::mem::forget(answer);
    pending
}

/// A request of sequence `id` and where its answer arrives; dropping the answer is the
/// caller leaving.
pub(super) fn pending_with_answer(
    id: u64,
    start: bool,
    end: bool,
    at: Instant,
) -> (Pending, testing::JobAnswer) {
    let (mut job, answer) = testing::job(InferRequest::default(), 1);
    job.enqueued_at = at;
    let pending = Pending {
        job,
        flags: SequenceFlags {
            id: SequenceId::Number(id),
            start,
            end,
        },
    };
    (pending, answer)
}

pub(super) fn direct() -> SequenceStrategy {
    SequenceStrategy::Direct {
        minimum_slot_utilization: 0.0,
        max_queue_delay: Duration::ZERO,
    }
}

pub(super) fn ids(round: Round) -> Vec<Option<u64>> {
    let Round::Ready(entries) = round else {
        panic!("expected a batch");
    };
    entries
        .into_iter()
        .map(|e| {
            e.map(|p| match p.flags.id {
                SequenceId::Number(n) => n,
                SequenceId::Text(_) => 0,
            })
        })
        .collect()
}

#[test]
fn new_sequences_spread_over_instances_then_wait_in_the_backlog() {
    let now = Instant::now();
    let mut t = Table::new("m", 2, 2, 2, direct(), Duration::from_secs(1));
    // Slot 0 of each instance first, then slot 1.
    assert_eq!(
        t.admit(pending(1, true, false, now), now).expect("1"),
        Some(0)
    );
    assert_eq!(
        t.admit(pending(2, true, false, now), now).expect("2"),
        Some(1)
    );
    assert_eq!(
        t.admit(pending(3, true, false, now), now).expect("3"),
        Some(0)
    );
    assert_eq!(
        t.admit(pending(4, true, false, now), now).expect("4"),
        Some(1)
    );
    // No slot left: backlog.
    assert_eq!(t.admit(pending(5, true, false, now), now).expect("5"), None);
    assert_eq!(t.occupancy().backlog, 1);
    // Instance 0 runs sequences 1 and 3 together.
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1), Some(3)]);
    // Sequence 3 ends: its slot goes to the backlogged sequence 5 on instance 0.
    t.admit(pending(3, false, true, now), now).expect("end");
    let (round, wake) = t.next_round(0, now);
    assert_eq!(ids(round), vec![None, Some(3)], "slot 0 idle: padding");
    assert_eq!(wake, vec![0]);
    assert_eq!(ids(t.next_round(0, now).0), vec![None, Some(5)]);
    assert_eq!(t.occupancy().backlog, 0);
}

#[test]
fn direct_rounds_stop_at_the_highest_active_slot() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 4, 4, direct(), Duration::from_secs(1));
    for id in 1..=3 {
        t.admit(pending(id, true, false, now), now).expect("start");
    }
    let _ = t.next_round(0, now);
    t.admit(pending(1, false, false, now), now).expect("next");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
    t.admit(pending(2, false, false, now), now).expect("next");
    assert_eq!(ids(t.next_round(0, now).0), vec![None, Some(2)]);
    assert!(matches!(t.next_round(0, now).0, Round::Wait(None)));
}

#[test]
fn a_sequence_whose_caller_left_is_released_when_its_request_has_run() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(60));
    t.admit(pending(9, true, false, now), now).expect("start");
    t.admit(pending(8, true, false, now), now).expect("start");
    let _ = t.next_round(0, now);
    let later = now + Duration::from_millis(5);
    t.executed(
        &[
            (SequenceId::Number(9), true),
            (SequenceId::Number(8), false),
        ],
        later,
    );
    assert!(t.take_reaper_due(), "the reaper is woken for it");
    let reaped = t.reap(later);
    assert_eq!(reaped.released, vec![SequenceId::Number(9)]);
    assert_eq!(
        t.occupancy().active,
        1,
        "sequence 8 keeps its slot until its idle timeout"
    );
    assert!(
        t.admit(pending(9, false, false, later), later).is_err(),
        "9 ended"
    );
}

#[test]
fn unknown_ended_and_expired_sequences_need_start() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_millis(10));
    let e = t
        .admit(pending(7, false, false, now), now)
        .expect_err("never started");
    assert_eq!(
        e.message(),
        "inference request for sequence 7 to model 'm' must specify the START flag on the first request of the sequence"
    );
    t.admit(pending(8, true, true, now), now)
        .expect("one-request sequence");
    assert!(
        t.admit(pending(8, false, false, now), now).is_err(),
        "ended"
    );
    let _ = t.next_round(0, now);
    t.admit(pending(9, true, false, now), now).expect("start");
    let _ = t.next_round(0, now);
    assert!(
        t.reap(now + Duration::from_millis(20)).released.is_empty(),
        "not idle while its request runs"
    );
    t.executed(&[(SequenceId::Number(9), false)], now);
    assert!(t.reap(now + Duration::from_millis(5)).released.is_empty());
    assert_eq!(t.occupancy().active, 1);
    t.reap(now + Duration::from_millis(20));
    assert_eq!(t.occupancy().active, 0);
    assert_eq!(t.occupancy().slots_used, 0);
    let e = t
        .admit(pending(9, false, false, now), now)
        .expect_err("expired");
    assert!(
        e.message()
            .contains("was released after 10000 µs without a request"),
        "{}",
        e.message()
    );
}

#[test]
fn oldest_takes_the_oldest_ready_requests_and_waits_for_a_preferred_size() {
    let now = Instant::now();
    let strategy = SequenceStrategy::Oldest {
        max_candidate_sequences: 3,
        preferred_batch_sizes: vec![2],
        max_queue_delay: Duration::from_millis(100),
    };
    let mut t = Table::new("m", 1, 3, 2, strategy, Duration::from_secs(1));
    t.admit(pending(1, true, false, now + Duration::from_millis(2)), now)
        .expect("1");
    let (round, _) = t.next_round(0, now);
    assert!(
        matches!(round, Round::Wait(Some(_))),
        "one of preferred two: wait"
    );
    t.admit(pending(2, true, false, now + Duration::from_millis(1)), now)
        .expect("2");
    t.admit(pending(3, true, false, now), now).expect("3");
    // Batch of two, oldest first, no padding.
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(3), Some(2)]);
    // The remaining one runs once the delay has passed.
    assert!(matches!(t.next_round(0, now).0, Round::Wait(Some(_))));
    assert_eq!(
        ids(t.next_round(0, now + Duration::from_millis(200)).0),
        vec![Some(1)]
    );
}

#[test]
fn backlogged_sequences_expire_with_their_request_timeout() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(60));
    t.admit(pending(1, true, false, now), now).expect("slot");
    let mut late = pending(2, true, false, now);
    late.job.request.parameters = vec![(
        "timeout".to_string(),
        crate::request::ParamValue::Int(1_000),
    )];
    assert_eq!(t.admit(late, now).expect("backlog"), None);
    assert!(t.reap(now).timed_out.is_empty());
    let reaped = t.reap(now + Duration::from_millis(2));
    assert_eq!(reaped.timed_out.len(), 1);
    assert_eq!(t.occupancy().backlog, 0);
    assert!(t.admit(pending(2, false, false, now), now).is_err(), "gone");
}

#[test]
fn direct_waits_for_minimum_slot_utilization_or_the_delay() {
    let now = Instant::now();
    let strategy = SequenceStrategy::Direct {
        minimum_slot_utilization: 0.5,
        max_queue_delay: Duration::from_millis(10),
    };
    let mut t = Table::new("m", 1, 4, 4, strategy, Duration::from_secs(1));
    t.admit(pending(1, true, false, now), now).expect("1");
    // One of four slots ready (0.25 < 0.5): wait until the delay has passed.
    assert!(matches!(t.next_round(0, now).0, Round::Wait(Some(_))));
    t.admit(pending(2, true, false, now), now).expect("2");
    // Two of four (0.5): run now.
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1), Some(2)]);
    t.admit(pending(1, false, false, now), now).expect("again");
    let later = now + Duration::from_millis(20);
    assert_eq!(ids(t.next_round(0, later).0), vec![Some(1)]);
}

#[test]
fn the_backlog_refuses_requests_beyond_its_bound() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(1));
    t.admit(pending(1, true, false, now), now)
        .expect("takes the slot");
    for id in 2..2 + MAX_BACKLOG_REQUESTS as u64 {
        t.admit(pending(id, true, false, now), now)
            .expect("backlogged");
    }
    assert_eq!(t.occupancy().backlog, MAX_BACKLOG_REQUESTS as u64);
    let full = |t: &mut Table, id| {
        t.admit(pending(id, id > 1_000_000, false, now), now)
            .expect_err("the backlog is full")
            .message()
            .to_string()
    };
    assert_eq!(
        full(&mut t, 2_000_000),
        "Exceeds maximum queue size",
        "a new sequence"
    );
    assert_eq!(
        full(&mut t, 2),
        "Exceeds maximum queue size",
        "a backlogged one"
    );
    t.admit(pending(1, false, false, now), now)
        .expect("a sequence in a slot is not held back");
}

#[test]
fn a_restarted_id_queues_behind_its_previous_end_and_never_runs_beside_it() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 2, 2, direct(), Duration::from_secs(1));
    // A client streams two sequences with ID 7 before either runs.
    t.admit(pending(7, true, false, now), now).expect("start");
    t.admit(pending(7, false, true, now), now).expect("end");
    t.admit(pending(7, true, false, now), now).expect("restart");
    t.admit(pending(7, false, true, now), now)
        .expect("end again");
    // Both sequences share slot 0: one request per round, in order, slot 1 never used.
    for _ in 0..3 {
        assert_eq!(ids(t.next_round(0, now).0), vec![Some(7)]);
        assert_eq!(t.occupancy().slots_used, 1);
    }
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(7)]);
    assert!(matches!(t.next_round(0, now).0, Round::Wait(None)));
    assert_eq!(t.occupancy().slots_used, 0);
    assert!(t.ending.is_empty());
}

#[test]
fn a_restarted_id_that_goes_idle_releases_the_shared_slot() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_millis(10));
    t.admit(pending(7, true, true, now), now)
        .expect("one-request sequence");
    t.admit(pending(7, true, false, now), now).expect("restart");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(7)]);
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(7)]);
    assert!(t.ending.is_empty(), "the first END has left the slot");
    t.executed(&[(SequenceId::Number(7), false)], now);
    assert_eq!(
        t.reap(now + Duration::from_millis(20)).released,
        vec![SequenceId::Number(7)]
    );
    // The slot is free for anyone, not remembered as ID 7's.
    t.admit(pending(8, true, false, now), now)
        .expect("new sequence");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(8)]);
}

#[test]
fn a_backlogged_restart_joins_the_slot_its_predecessor_drains() {
    let now = Instant::now();
    let mut t = Table::new("m", 2, 1, 1, direct(), Duration::from_secs(1));
    t.admit(pending(1, true, false, now), now).expect("1");
    t.admit(pending(2, true, false, now), now).expect("2");
    // ID 7 waits in the backlog, ends there, and is restarted there.
    t.admit(pending(7, true, false, now), now).expect("7");
    t.admit(pending(7, false, true, now), now).expect("7 end");
    t.admit(pending(7, true, false, now), now)
        .expect("7 restart");
    assert_eq!(t.occupancy().backlog, 2);
    // Sequence 1 ends on instance 0: the first 7 takes its slot, and the second joins it
    // when sequence 2 frees instance 1's slot.
    t.admit(pending(1, false, true, now), now).expect("1 end");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
    assert_eq!(t.occupancy().backlog, 1);
    t.admit(pending(2, false, true, now), now).expect("2 end");
    let _ = t.next_round(1, now);
    let _ = t.next_round(1, now);
    assert_eq!(t.occupancy().backlog, 0);
    for _ in 0..3 {
        assert_eq!(ids(t.next_round(0, now).0), vec![Some(7)]);
    }
    assert!(matches!(t.next_round(1, now).0, Round::Wait(None)));
}

/// A sequence request with input `IN` of `shape`.
fn shaped(id: u64, shape: Vec<i64>, at: Instant) -> Pending {
    let mut p = pending(id, true, false, at);
    p.job.request.inputs.push(crate::request::InputTensor {
        name: "IN".into(),
        datatype: nereid_proto::DataType::Fp32,
        shape,
        data: bytes::Bytes::new(),
        device: None,
    });
    p
}

#[test]
fn different_shapes_share_a_round_only_when_the_input_is_ragged() {
    let now = Instant::now();
    let shapes = [vec![1, 2], vec![1, 3], vec![1, 2], vec![1, 3]];
    let mut plain = Table::new("m", 1, 4, 4, direct(), Duration::from_secs(1));
    let mut ragged = Table::new("m", 1, 4, 4, direct(), Duration::from_secs(1))
        .with_ragged_inputs(vec!["IN".into()]);
    for (id, shape) in shapes.iter().enumerate() {
        plain
            .admit(shaped(id as u64, shape.clone(), now), now)
            .expect("admitted");
        ragged
            .admit(shaped(id as u64, shape.clone(), now), now)
            .expect("admitted");
    }
    // The [1, 3] requests wait for a round of their own unless IN is ragged; each round
    // spans every slot with a request queued (Triton's padding).
    let (two, three) = (
        vec![Some(0), None, Some(2), None],
        vec![None, Some(1), None, Some(3)],
    );
    assert_eq!(ids(plain.next_round(0, now).0), two);
    assert_eq!(ids(plain.next_round(0, now).0), three);
    let all = vec![Some(0), Some(1), Some(2), Some(3)];
    assert_eq!(ids(ragged.next_round(0, now).0), all);
}

#[test]
fn an_iterative_request_requeues_in_its_slot_and_its_completion_frees_the_slot() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(1));
    t.admit(pending(1, true, false, now), now).expect("1");
    // A second sequence waits in the backlog: the only slot is taken.
    assert_eq!(t.admit(pending(2, true, false, now), now).expect("2"), None);
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
    // Rescheduled: back in its slot, ahead of the backlog.
    assert_eq!(t.requeue(pending(1, false, false, now)).ok(), Some(0));
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
    // Completed: the slot goes to the backlogged sequence.
    assert_eq!(t.finish(&SequenceId::Number(1)), vec![0]);
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(2)]);
    // A sequence that holds no slot any more gets its request back.
    assert!(t.requeue(pending(1, false, false, now)).is_err());
}
