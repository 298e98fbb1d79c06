use std::time::{Duration, Instant};

use super::tests::{direct, ids, pending, pending_with_answer};
use super::*;

fn numbers(cancelled: &Cancelled) -> (Vec<u64>, Vec<SequenceId>) {
    let requests = cancelled
        .requests
        .iter()
        .map(|p| match p.flags.id {
            SequenceId::Number(n) => n,
            SequenceId::Text(_) => 0,
        })
        .collect();
    (requests, cancelled.sequences.clone())
}

#[test]
fn a_head_whose_caller_left_cancels_its_sequence_and_frees_the_slot() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(60));
    t.admit(pending(1, true, false, now), now).expect("start 1");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)], "1 runs");
    // While 1's START runs: two more of 1 queue, the first one's caller leaves; 2 waits
    // in the backlog.
    let (left, answer) = pending_with_answer(1, false, false, now);
    t.admit(left, now).expect("1 again");
    t.admit(pending(1, false, false, now), now)
        .expect("1 again");
    t.admit(pending(2, true, false, now), now).expect("2");
    drop(answer);
    assert_eq!(t.cancel_left_heads(0), vec![0], "2 takes the slot");
    let cancelled = t.take_cancelled();
    assert_eq!(
        numbers(&cancelled),
        (vec![1, 1], vec![SequenceId::Number(1)])
    );
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(2)]);
    let refused = t
        .admit(pending(1, false, false, now), now)
        .expect_err("1 ended");
    assert!(refused.message().contains("was cancelled"), "{refused}");
    assert!(
        t.admit(pending(1, true, false, now), now).is_ok(),
        "restart"
    );
}

#[test]
fn only_the_head_is_looked_at() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(60));
    t.admit(pending(1, true, false, now), now).expect("start");
    let (left, answer) = pending_with_answer(1, false, false, now);
    t.admit(left, now).expect("second");
    drop(answer);
    assert!(t.cancel_left_heads(0).is_empty());
    assert!(
        t.take_cancelled().requests.is_empty(),
        "the START still runs"
    );
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
    t.cancel_left_heads(0);
    assert_eq!(
        numbers(&t.take_cancelled()).0,
        vec![1],
        "then the second is"
    );
    assert_eq!(t.occupancy().slots_used, 0);
}

#[test]
fn a_restart_behind_a_cancelled_end_keeps_the_slot() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(60));
    t.admit(pending(1, true, false, now), now).expect("start");
    let _ = t.next_round(0, now);
    let (left, answer) = pending_with_answer(1, false, true, now);
    t.admit(left, now).expect("end");
    t.admit(pending(1, true, false, now), now).expect("restart");
    drop(answer);
    t.cancel_left_heads(0);
    assert_eq!(numbers(&t.take_cancelled()).0, vec![1], "the END only");
    let Round::Ready(entries) = t.next_round(0, now).0 else {
        panic!("the restart runs");
    };
    assert!(entries[0].as_ref().is_some_and(|p| p.flags.start));
}

#[test]
fn a_backlogged_sequence_with_a_caller_gone_is_cancelled_whole() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(60));
    t.admit(pending(1, true, false, now), now).expect("start 1");
    let (first, answer) = pending_with_answer(2, true, false, now);
    t.admit(first, now).expect("2 backlogged");
    t.admit(pending(2, false, false, now), now)
        .expect("2 again");
    t.admit(pending(3, true, false, now), now)
        .expect("3 backlogged");
    assert!(t.has_backlog());
    let _ = t.reap(now);
    assert!(t.take_cancelled().requests.is_empty(), "every caller waits");
    drop(answer);
    let _ = t.reap(now);
    assert_eq!(
        numbers(&t.take_cancelled()),
        (vec![2, 2], vec![SequenceId::Number(2)])
    );
    assert_eq!(t.occupancy().backlog, 1, "3 still waits");
    assert!(t.admit(pending(2, false, false, now), now).is_err());
}

#[test]
fn a_backend_keeping_state_is_told_to_forget_a_cancelled_sequence() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(60)).with_backend_state();
    t.admit(pending(1, true, false, now), now).expect("start");
    let _ = t.next_round(0, now);
    let (left, answer) = pending_with_answer(1, false, false, now);
    t.admit(left, now).expect("next");
    drop(answer);
    assert_eq!(t.cancel_left_heads(0), vec![0]);
    assert_eq!(t.take_releases(0), vec![SequenceId::Number(1)]);
}
