//! The sequence batcher running under paused time: an idle sequence is released exactly
//! when its deadline passes, by a reaper that sleeps until then.

use std::sync::Arc;
use std::time::Duration;

use super::SequenceBatcher;
use crate::request::ParamValue;
use crate::scheduler::hold::Hooks;
use crate::scheduler::{Job, Scheduler};
use crate::stats::ModelStats;
use crate::testing::{self, JobAnswer, TestBackend};

/// A sequence model released after one second without a request, on one instance of
/// `backend`.
fn start(backend: &TestBackend) -> (SequenceBatcher, Arc<ModelStats>) {
    start_hooked(backend, 1, Hooks::default())
}

/// [`start`] with batches of up to `max_batch` and the given test hooks.
fn start_hooked(
    backend: &TestBackend,
    max_batch: usize,
    hooks: Hooks,
) -> (SequenceBatcher, Arc<ModelStats>) {
    let spec = testing::spec(
        "seq",
        &format!(
            r#"backend: "identity" max_batch_size: {max_batch}
               input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
               output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
               sequence_batching {{ max_sequence_idle_microseconds: 1000000 }}"#
        ),
    );
    let stats = Arc::new(ModelStats::default());
    let instances = backend.instances("seq", 1);
    let batcher = SequenceBatcher::start_with(spec, stats.clone(), instances, None, &[], hooks)
        .expect("batcher starts");
    (batcher, stats)
}

/// A request of sequence `id`, and where its answer arrives.
fn job(id: u64, start: bool) -> (Job, JobAnswer) {
    let mut request = testing::request(
        "seq",
        &id.to_string(),
        vec![testing::int32_input("INPUT0", &[1, 1], &[1])],
    );
    request.parameters = vec![
        ("sequence_id".into(), ParamValue::Uint(id)),
        ("sequence_start".into(), ParamValue::Bool(start)),
    ];
    testing::job(request, 1)
}

fn active(stats: &ModelStats) -> u64 {
    stats
        .snapshot("seq", 1)
        .sequences
        .expect("a sequence model publishes occupancy")
        .active
}

/// Lets the batcher's tasks run without the runtime going idle: an idle paused runtime
/// would jump the clock to the reaper's deadline.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Waits for an answer from the instance (an OS thread) while keeping the runtime busy.
async fn answered(mut answer: JobAnswer) {
    let response = loop {
        match answer.try_recv() {
            Ok(response) => break response,
            Err(_) => tokio::task::yield_now().await,
        }
    };
    response.expect("the request succeeds");
}

#[tokio::test(start_paused = true)]
async fn a_sequence_is_not_idle_while_its_request_runs() {
    // The request runs for 300 ms of real time; meanwhile the clock moves past the idle
    // timeout. Idle time counts from when the request finished, not from its arrival.
    let backend = TestBackend::identity().with_delay(Duration::from_millis(300));
    let (batcher, stats) = start(&backend);
    let (first, answer) = job(7, true);
    batcher.enqueue(first).expect("admitted");
    settle().await;
    tokio::time::advance(Duration::from_millis(1500)).await;
    settle().await;
    assert_eq!(active(&stats), 1, "released while its request was running");
    answered(answer).await;
    settle().await;
    tokio::time::advance(Duration::from_millis(999)).await;
    settle().await;
    assert_eq!(
        active(&stats),
        1,
        "idle for less than a second since it finished"
    );
    let (next, answer) = job(7, false);
    batcher.enqueue(next).expect("the sequence is still there");
    answered(answer).await;
    tokio::task::spawn_blocking(move || batcher.stop())
        .await
        .expect("stops");
}

#[tokio::test(start_paused = true)]
async fn an_idle_sequence_is_released_when_its_deadline_passes() {
    let (batcher, stats) = start(&TestBackend::identity());
    let (first, answer) = job(7, true);
    batcher.enqueue(first).expect("admitted");
    answered(answer).await;
    // The dispatcher, woken when the instance finished, starts the idle clock.
    settle().await;
    assert_eq!(active(&stats), 1);

    tokio::time::advance(Duration::from_millis(999)).await;
    settle().await;
    assert_eq!(active(&stats), 1, "idle for less than a second");

    tokio::time::advance(Duration::from_millis(2)).await;
    settle().await;
    assert_eq!(active(&stats), 0, "released once its deadline passed");
    let (late, _) = job(7, false);
    let error = batcher.enqueue(late).expect_err("the sequence is gone");
    assert!(
        error.message().contains("max_sequence_idle_microseconds"),
        "{}",
        error.message()
    );
    tokio::task::spawn_blocking(move || batcher.stop())
        .await
        .expect("stops");
}

#[tokio::test(start_paused = true)]
async fn the_delay_hook_holds_the_first_requests_until_enough_are_queued() {
    // TRITONSERVER_DELAY_SCHEDULER=4: two sequences of two requests run as two batches
    // of two, however the requests arrive; nothing runs before the fourth, however long.
    let backend = TestBackend::identity();
    let hooks = Hooks {
        queued: 4,
        backlog: 0,
    };
    let (batcher, _) = start_hooked(&backend, 2, hooks);
    let mut answers = Vec::new();
    for (id, start) in [(1, true), (2, true), (1, false)] {
        let (j, answer) = job(id, start);
        batcher.enqueue(j).expect("admitted");
        answers.push(answer);
    }
    settle().await;
    tokio::time::advance(Duration::from_secs(3600)).await;
    settle().await;
    assert!(backend.executions().is_empty(), "held with 3 of 4 queued");
    let (j, answer) = job(2, false);
    batcher.enqueue(j).expect("admitted");
    answers.push(answer);
    for answer in answers {
        answered(answer).await;
    }
    assert_eq!(backend.batch_sizes(), vec![2, 2]);
    tokio::task::spawn_blocking(move || batcher.stop())
        .await
        .expect("stops");
}
