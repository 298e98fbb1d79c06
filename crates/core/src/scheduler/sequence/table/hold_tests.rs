//! The test hooks' holds in the table: when an instance may form its first batch.

use std::time::{Duration, Instant};

use super::tests::{direct, ids, pending};
use super::*;

fn hooks(queued: usize, backlog: usize) -> Hooks {
    Hooks { queued, backlog }
}

fn held(t: &mut Table, instance: usize, now: Instant) -> bool {
    matches!(t.next_round(instance, now).0, Round::Wait(None))
}

#[test]
fn direct_holds_until_n_requests_are_queued_then_batches_them() {
    // L0_sequence_batcher's test_simple_sequence: two sequences of four requests with
    // TRITONSERVER_DELAY_SCHEDULER=8 run as four batches of two.
    let now = Instant::now();
    let mut t = Table::new("m", 1, 4, 4, direct(), Duration::from_secs(1)).with_hooks(hooks(8, 0));
    for step in 0..4 {
        for id in [1, 2] {
            if step == 3 && id == 2 {
                break;
            }
            t.admit(pending(id, step == 0, step == 3, now), now)
                .expect("admitted");
            assert!(held(&mut t, 0, now), "held below 8 queued");
        }
    }
    assert_eq!(t.held(), vec![0]);
    t.admit(pending(2, false, true, now), now).expect("8th");
    for _ in 0..4 {
        assert_eq!(ids(t.next_round(0, now).0), vec![Some(1), Some(2)]);
    }
    assert!(t.held().is_empty());
    // Lifted for good: a lone request runs at once.
    t.admit(pending(3, true, true, now), now).expect("3");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(3)]);
}

#[test]
fn direct_counts_every_instance_and_keeps_a_lifted_instance_count() {
    let now = Instant::now();
    let mut t = Table::new("m", 2, 1, 1, direct(), Duration::from_secs(1)).with_hooks(hooks(4, 0));
    t.admit(pending(1, true, false, now), now)
        .expect("1 on instance 0");
    t.admit(pending(2, true, false, now), now)
        .expect("2 on instance 1");
    t.admit(pending(1, false, false, now), now).expect("1");
    assert!(held(&mut t, 0, now), "3 of 4 queued");
    t.admit(pending(2, false, false, now), now).expect("2");
    // Instance 1 sees 2 + its own 2: lifted; it runs and drains.
    assert_eq!(ids(t.next_round(1, now).0), vec![Some(2)]);
    assert_eq!(ids(t.next_round(1, now).0), vec![Some(2)]);
    assert_eq!(t.held(), vec![0]);
    // Instance 0 still counts instance 1 as it was when lifted, as Triton does.
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
    assert!(t.held().is_empty());
}

#[test]
fn direct_also_waits_for_the_backlog_hook() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(1)).with_hooks(hooks(1, 2));
    t.admit(pending(1, true, false, now), now).expect("slot");
    assert!(held(&mut t, 0, now), "1 queued, but no backlog yet");
    t.admit(pending(2, true, false, now), now).expect("backlog");
    assert!(held(&mut t, 0, now), "1 of 2 backlogged");
    t.admit(pending(2, false, true, now), now).expect("backlog");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
}

#[test]
fn a_sequence_restarted_behind_its_end_counts_as_backlog() {
    // L0_sequence_batcher's test_backlog_same_correlation_id: four sequences of three
    // fill the four slots (12 queued), then ID 2 starts again (START, END) while its first
    // sequence is still queued. Triton backlogs the restart; with
    // TRITONSERVER_DELAY_SCHEDULER=12 and TRITONSERVER_BACKLOG_DELAY_SCHEDULER=2 the hold
    // lifts once both of its requests wait.
    let now = Instant::now();
    let mut t = Table::new("m", 1, 4, 4, direct(), Duration::from_secs(1)).with_hooks(hooks(12, 2));
    for step in 0..3 {
        for id in 1..=4 {
            t.admit(pending(id, step == 0, step == 2, now), now)
                .expect("admitted");
        }
    }
    assert!(held(&mut t, 0, now), "12 queued, no backlog yet");
    t.admit(pending(2, true, false, now), now).expect("restart");
    assert!(held(&mut t, 0, now), "1 of 2 backlogged");
    t.admit(pending(2, false, true, now), now)
        .expect("restart end");
    for _ in 0..3 {
        assert_eq!(
            ids(t.next_round(0, now).0),
            vec![Some(1), Some(2), Some(3), Some(4)]
        );
    }
    // The restart takes slot 0, the first freed once every END of the round has left:
    // two batches of one, as Triton's statistics show ({4: 3, 1: 2}), not of two.
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(2)]);
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(2)]);
    assert!(matches!(t.next_round(0, now).0, Round::Wait(None)));
}

#[test]
fn the_instance_lifted_last_wakes_the_ones_still_held() {
    // L0_sequence_batcher's test_half_batch on four non-batching instances: two
    // sequences of four with TRITONSERVER_DELAY_SCHEDULER=8. Instance 0 looks after the
    // 8th request while instance 1's count is still its old 3; instance 1 then lifts
    // and must wake instance 0, or it would wait for a request that never comes.
    let now = Instant::now();
    let mut t = Table::new("m", 4, 1, 1, direct(), Duration::from_secs(1)).with_hooks(hooks(8, 0));
    for step in 0..4 {
        for id in [1, 2] {
            t.admit(pending(id, step == 0, step == 3, now), now)
                .expect("admitted");
            if !(step == 3 && id == 2) {
                assert!(held(&mut t, 0, now) && held(&mut t, 1, now), "below 8");
            }
        }
    }
    assert!(
        held(&mut t, 0, now),
        "instance 0 still counts instance 1 as 3"
    );
    let (round, wake) = t.next_round(1, now);
    assert_eq!(ids(round), vec![Some(2)]);
    assert!(wake.contains(&0), "instance 0 is woken: {wake:?}");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
}

#[test]
fn the_backlog_hook_alone_holds_nothing() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 1, 1, direct(), Duration::from_secs(1)).with_hooks(hooks(0, 5));
    t.admit(pending(1, true, false, now), now).expect("slot");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
    assert!(t.held().is_empty());
}

#[test]
fn oldest_holds_until_n_slots_of_the_instance_have_a_request() {
    let now = Instant::now();
    let strategy = SequenceStrategy::Oldest {
        max_candidate_sequences: 4,
        preferred_batch_sizes: Vec::new(),
        max_queue_delay: Duration::ZERO,
    };
    let mut t = Table::new("m", 1, 4, 4, strategy, Duration::from_secs(1)).with_hooks(hooks(2, 9));
    for step in 0..3 {
        t.admit(pending(1, step == 0, false, now), now).expect("1");
    }
    assert!(
        held(&mut t, 0, now),
        "three requests, but one slot: the backlog hook is ignored"
    );
    t.admit(pending(2, true, false, now), now).expect("2");
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1), Some(2)]);
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
}

#[test]
fn lifting_the_holds_lets_queued_requests_run() {
    let now = Instant::now();
    let mut t = Table::new("m", 1, 2, 2, direct(), Duration::from_secs(1)).with_hooks(hooks(5, 0));
    t.admit(pending(1, true, false, now), now).expect("1");
    assert!(held(&mut t, 0, now));
    t.lift_holds();
    assert_eq!(ids(t.next_round(0, now).0), vec![Some(1)]);
}
