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
fn turns_go_by_executions_times_priority_then_arrival() {
    let limiter = RateLimiter::new(Vec::new());
    let one = limiter
        .register(Some(&needs(&[], 1)), 0)
        .expect("registers");
    let two = limiter
        .register(Some(&needs(&[], 2)), 0)
        .expect("registers");
    let mut state = limiter.state.lock();
    state.waiting = vec![(two.id, 0), (one.id, 1)];
    assert_eq!(
        state.first_waiting(),
        Some(two.id),
        "no executions yet: arrival"
    );
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
        Some(two.id),
        "2 × 1 = 1 × 2: arrival decides"
    );
    executed(&mut state, one.id, 3);
    assert_eq!(state.first_waiting(), Some(two.id));
    drop(state);
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
