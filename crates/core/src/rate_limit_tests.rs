//! The limiter on its own: Triton's load errors, instances sharing a resource never
//! running at once while one without it does, and turns by executions × priority.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nereid_proto::inference::model_rate_limiter::Resource;

use super::*;

fn needs(resources: &[(&str, bool, u32)], priority: u32) -> ModelRateLimiter {
    ModelRateLimiter {
        resources: resources
            .iter()
            .map(|(name, global, count)| Resource {
                name: name.to_string(),
                global: *global,
                count: *count,
            })
            .collect(),
        priority,
    }
}

fn limit(name: &str, count: u64, device: Option<i32>) -> ResourceLimit {
    ResourceLimit {
        name: name.into(),
        count,
        device,
    }
}

#[test]
fn resources_beyond_what_is_given_fail_with_tritons_message() {
    let limiter = RateLimiter::new(vec![limit("R", 1, None), limit("G", 3, Some(1))]);
    let error = limiter
        .register(Some(&needs(&[("R", false, 2)], 0)), 0)
        .err()
        .expect("refused");
    assert_eq!(
        error.message(),
        "Resource count for \"R\" is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 2"
    );
    // Not given at all: none of it exists.
    let error = limiter
        .register(Some(&needs(&[("X", false, 1)], 0)), 0)
        .err()
        .expect("refused");
    assert!(error.message().contains("\"X\" is limited to 0"), "{error}");
    // A global resource takes what is given on any device; a refused instance left
    // nothing behind, so these fit.
    let _global = limiter
        .register(Some(&needs(&[("G", true, 3)], 0)), 0)
        .expect("fits");
    let _r = limiter
        .register(Some(&needs(&[("R", false, 1)], 0)), 0)
        .expect("fits");
}

#[test]
fn a_resource_cannot_be_both_global_and_per_device() {
    let limiter = RateLimiter::new(Vec::new());
    let _device = limiter
        .register(Some(&needs(&[("R", false, 1)], 0)), 0)
        .expect("registers");
    let error = limiter
        .register(Some(&needs(&[("R", true, 1)], 0)), 0)
        .err()
        .expect("refused");
    assert_eq!(
        error.message(),
        "Resource \"R\" is present as both global and device-specific resource in the model configuration."
    );
}

#[test]
fn instances_sharing_a_resource_never_overlap_while_others_run() {
    let limiter = RateLimiter::new(vec![limit("R", 1, None)]);
    let shared: Vec<Registration> = (0..2)
        .map(|_| {
            limiter
                .register(Some(&needs(&[("R", false, 1)], 0)), 0)
                .expect("registers")
        })
        .collect();
    let free = limiter.register(None, 0).expect("registers");
    let (inside, most, free_ran_inside) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    std::thread::scope(|scope| {
        for registration in &shared {
            let (inside, most) = (&inside, &most);
            scope.spawn(move || {
                for _ in 0..20 {
                    registration.run(|| {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(2));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            });
        }
        let (inside, free_ran_inside, free) = (&inside, &free_ran_inside, &free);
        scope.spawn(move || {
            for _ in 0..40 {
                free.run(|| {
                    if inside.load(Ordering::SeqCst) > 0 {
                        free_ran_inside.fetch_add(1, Ordering::SeqCst);
                    }
                });
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    });
    assert_eq!(most.load(Ordering::SeqCst), 1, "never two holders of R");
    assert!(
        free_ran_inside.load(Ordering::SeqCst) > 0,
        "the instance without resources ran while R was held"
    );
}

#[test]
fn turns_go_by_scaled_executions_then_priority_then_arrival() {
    let limiter = RateLimiter::new(Vec::new());
    let one = limiter
        .register(Some(&needs(&[], 1)), 0)
        .expect("registers");
    let two = limiter
        .register(Some(&needs(&[], 2)), 0)
        .expect("registers");
    let other_one = limiter
        .register(Some(&needs(&[], 1)), 0)
        .expect("registers");
    let mut state = limiter.state.lock();
    state.waiting = vec![(two.id, 0), (other_one.id, 1), (one.id, 2)];
    assert_eq!(
        state.first_waiting(),
        Some(other_one.id),
        "no executions yet: priority 1 before 2, then arrival"
    );
    state.waiting = vec![(two.id, 0), (one.id, 1)];
    let executed = |state: &mut State, id: u64, n: u64| {
        state.instances.get_mut(&id).expect("registered").executions = n;
    };
    // Priority 2 after 1 execution weighs as priority 1 after 2.
    executed(&mut state, two.id, 1);
    executed(&mut state, one.id, 1);
    assert_eq!(state.first_waiting(), Some(one.id));
    executed(&mut state, one.id, 2);
    assert_eq!(
        state.first_waiting(),
        Some(one.id),
        "2 × 1 = 1 × 2: the higher priority (1) goes first, though it came later"
    );
    executed(&mut state, one.id, 3);
    assert_eq!(state.first_waiting(), Some(two.id));
    drop(state);
}

/// Executions of two always-busy instances sharing one resource, priorities 1 and 2,
/// each keeping its place in line when it releases.
fn busy_pair() -> (usize, usize) {
    let limiter = RateLimiter::new(Vec::new());
    let first = limiter
        .register(Some(&needs(&[("R", false, 1)], 1)), 0)
        .expect("registers");
    let second = limiter
        .register(Some(&needs(&[("R", false, 1)], 2)), 0)
        .expect("registers");
    let total = AtomicUsize::new(0);
    let counts = [AtomicUsize::new(0), AtomicUsize::new(0)];
    std::thread::scope(|scope| {
        for (turn, count) in [&first, &second].into_iter().zip(&counts) {
            let total = &total;
            scope.spawn(move || {
                while total.load(Ordering::SeqCst) < 90 {
                    turn.run_then(
                        || {
                            total.fetch_add(1, Ordering::SeqCst);
                            count.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(1));
                        },
                        || total.load(Ordering::SeqCst) < 90,
                    );
                }
            });
        }
    });
    (
        counts[0].load(Ordering::SeqCst),
        counts[1].load(Ordering::SeqCst),
    )
}

#[test]
fn priorities_count_when_a_busy_instance_keeps_its_place_in_line() {
    // Priority 2 gets half the turns of priority 1 (Triton's L0_rate_limiter
    // cross-model test expects about 2:1).
    // (Without keeping its place, the one that finished comes back after the other was
    // served, and turns alternate whatever the priorities.)
    let (one, two) = busy_pair();
    assert!(
        one >= 55 && two >= 25,
        "priority 1: {one}, priority 2: {two}"
    );
}

#[test]
fn a_place_kept_in_line_and_given_up_lets_the_others_go() {
    let limiter = RateLimiter::new(Vec::new());
    let first = limiter
        .register(Some(&needs(&[("R", false, 1)], 1)), 0)
        .expect("registers");
    let second = limiter
        .register(Some(&needs(&[("R", false, 1)], 1)), 0)
        .expect("registers");
    // `first` keeps its place in line; `second` (fewer executions) still goes first.
    first.run_then(|| (), || true);
    second.run_then(|| (), || false);
    first.leave_line();
    // Nothing is left waiting: `second` gets its turn at once.
    assert!(limiter.state.lock().waiting.is_empty());
    second.run(|| ());
}

#[test]
fn the_resource_map_falls_when_the_instance_needing_most_leaves() {
    let limiter = RateLimiter::new(Vec::new());
    let small = limiter
        .register(Some(&needs(&[("R1", false, 3)], 0)), 0)
        .expect("fits");
    let large = limiter
        .register(Some(&needs(&[("R1", false, 4), ("G", true, 1)], 0)), 0)
        .expect("fits");
    let map = |limiter: &RateLimiter| resource_map(&limiter.state.lock().available);
    assert_eq!(
        map(&limiter),
        "\nMax Resource Map===>\n\tDevice: GLOBAL\n\t\tResource: G\t Count: 1\n\tDevice: 0\n\t\tResource: R1\t Count: 4\n"
    );
    drop(large);
    assert_eq!(
        map(&limiter),
        "\nMax Resource Map===>\n\tDevice: 0\n\t\tResource: R1\t Count: 3\n"
    );
    drop(small);
}
