//! The sequence batcher running under paused time: an idle sequence is released exactly
//! when its deadline passes, by a reaper that sleeps until then.

use std::sync::Arc;
use std::time::Duration;

use super::SequenceBatcher;
use crate::request::ParamValue;
use crate::scheduler::{Job, Scheduler};
use crate::stats::ModelStats;
use crate::testing::{self, Answer, TestBackend};

/// A sequence model released after one second without a request, on one identity instance.
fn start() -> (SequenceBatcher, Arc<ModelStats>) {
    let spec = testing::spec(
        "seq",
        r#"backend: "identity" max_batch_size: 1
           input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
           sequence_batching { max_sequence_idle_microseconds: 1000000 }"#,
    );
    let stats = Arc::new(ModelStats::default());
    let instances = TestBackend::identity().instances("seq", 1);
    let batcher =
        SequenceBatcher::start(spec, stats.clone(), instances, None).expect("batcher starts");
    (batcher, stats)
}

/// A request of sequence `id`, and where its answer arrives.
fn job(id: u64, start: bool) -> (Job, Answer) {
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

#[tokio::test(start_paused = true)]
async fn an_idle_sequence_is_released_when_its_deadline_passes() {
    let (batcher, stats) = start();
    let (first, mut answer) = job(7, true);
    batcher.enqueue(first).expect("admitted");
    // The instance is an OS thread: wait for it while keeping the runtime busy.
    let response = loop {
        match answer.try_recv() {
            Ok(response) => break response,
            Err(_) => tokio::task::yield_now().await,
        }
    };
    response.expect("the START request succeeds");
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
