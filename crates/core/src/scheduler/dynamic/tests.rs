//! Tests of the dynamic batcher: the queue, the batch plan, and the running task with the
//! test backend under paused time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_proto::inference::model_rate_limiter::Resource;
use nereid_proto::inference::ModelRateLimiter;

use super::plan::{plan_batch, plan_growth, Growth, Plan};
use super::queue::PriorityQueues;
use super::DynamicBatcher;
use crate::model::{DynamicBatchingSpec, ModelSpec, SchedulingSpec};
use crate::rate_limit::RateLimiter;
use crate::request::ParamValue;
use crate::scheduler::hold::Hooks;
use crate::scheduler::{BatchCut, BatchStrategy, InstancePool, Job, Scheduler};
use crate::stats::{FailureReason, ModelStats, RequestRecord};
use crate::testing::{self, JobAnswer, TestBackend};

fn spec(batching: &str) -> Arc<ModelSpec> {
    testing::spec(
        "m",
        &format!(
            r#"backend: "fake" max_batch_size: 8
               input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
               output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
               dynamic_batching {{ {batching} }}"#
        ),
    )
}

fn batching(spec: &ModelSpec) -> &DynamicBatchingSpec {
    match &spec.scheduling {
        SchedulingSpec::Dynamic(d) => d,
        _ => unreachable!("the test spec batches"),
    }
}

/// A job and where its answer arrives.
type Answered = (Job, JobAnswer);

fn job(value: i32, batch: usize, width: usize, params: Vec<(&str, ParamValue)>) -> Answered {
    let values = vec![value; batch * width];
    let mut request = testing::request(
        "m",
        &value.to_string(),
        vec![testing::int32_input(
            "IN",
            &[batch as i64, width as i64],
            &values,
        )],
    );
    request.parameters = params
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    testing::job(request, batch)
}

/// `answered` with its job counted in `stats`, as a model's own requests are.
fn counted(answered: Answered, stats: &Arc<ModelStats>) -> Answered {
    let (mut job, rx) = answered;
    job.record = RequestRecord::open(
        stats.clone(),
        job.enqueued_at,
        None,
        FailureReason::Rejected,
    );
    (job, rx)
}

fn queues_of(spec: &ModelSpec, jobs: Vec<Job>) -> PriorityQueues {
    let mut q = PriorityQueues::new(batching(spec));
    for j in jobs {
        q.push(j).expect("room");
    }
    q
}

#[test]
fn plan_executes_full_or_preferred_batches_at_once() {
    let spec = spec("preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100000");
    let s = batching(&spec);
    let jobs: Vec<Job> = (0..5).map(|i| job(i, 1, 2, vec![]).0).collect();
    let now = jobs[0].enqueued_at;
    let q = queues_of(&spec, jobs);
    assert_eq!(plan_batch(s, &spec, &q, None, now), Plan::Execute(4));
    // Three queued: the largest preferred size they fill exactly runs at once.
    let jobs: Vec<Job> = (0..3).map(|i| job(i, 1, 2, vec![]).0).collect();
    let now = jobs[0].enqueued_at;
    let q = queues_of(&spec, jobs);
    assert_eq!(plan_batch(s, &spec, &q, None, now), Plan::Execute(2));
    // Once the delay has passed, everything queued runs (as in Triton).
    assert_eq!(
        plan_batch(s, &spec, &q, None, now + Duration::from_millis(100)),
        Plan::Execute(3)
    );
    // One request: no preferred size reached, so it waits for the delay.
    let single = job(0, 1, 2, vec![]).0;
    let at = single.enqueued_at;
    let q = queues_of(&spec, vec![single]);
    assert_eq!(
        plan_batch(s, &spec, &q, None, at),
        Plan::WaitUntil(at + Duration::from_millis(100))
    );
}

#[test]
fn plan_cuts_a_preferred_size_without_waiting_for_a_larger_one() {
    // Triton's L0_batcher: preferred [2, 6] and a 10 s delay; one request of batch 2 runs
    // at once instead of waiting for a batch of 6.
    let spec = spec("preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 10000000");
    let s = batching(&spec);
    let jobs = vec![job(0, 2, 1, vec![]).0];
    let now = jobs[0].enqueued_at;
    assert_eq!(
        plan_batch(s, &spec, &queues_of(&spec, jobs), None, now),
        Plan::Execute(1)
    );
    // Batches of 3 and 4: neither prefix is preferred, and the second would outgrow 6, so
    // the first runs at once.
    let jobs = vec![job(0, 3, 1, vec![]).0, job(1, 4, 1, vec![]).0];
    assert_eq!(
        plan_batch(s, &spec, &queues_of(&spec, jobs), None, now),
        Plan::Execute(1)
    );
    // 1 + 1 + 1: 2 is preferred and runs now; 3 would wait.
    let jobs = (0..3).map(|i| job(i, 1, 1, vec![]).0).collect();
    assert_eq!(
        plan_batch(s, &spec, &queues_of(&spec, jobs), None, now),
        Plan::Execute(2)
    );
    // 1 + 1 + 1 + 1 + 1 + 1: the larger preferred size wins.
    let jobs = (0..6).map(|i| job(i, 1, 1, vec![]).0).collect();
    assert_eq!(
        plan_batch(s, &spec, &queues_of(&spec, jobs), None, now),
        Plan::Execute(6)
    );
}

#[test]
fn plan_respects_max_batch_size_and_shapes() {
    let spec = spec("");
    let s = batching(&spec);
    let jobs = vec![job(0, 5, 2, vec![]).0, job(1, 4, 2, vec![]).0];
    let now = jobs[0].enqueued_at;
    assert_eq!(
        plan_batch(s, &spec, &queues_of(&spec, jobs), None, now),
        Plan::Execute(1)
    );
    let jobs = vec![
        job(0, 1, 2, vec![]).0,
        job(1, 1, 3, vec![]).0,
        job(2, 1, 2, vec![]).0,
    ];
    assert_eq!(
        plan_batch(s, &spec, &queues_of(&spec, jobs), None, now),
        Plan::Execute(1)
    );
}

#[test]
fn requests_with_different_inputs_are_not_batched_together() {
    // Triton's L0_optional_input: a request with an optional input the first one left
    // out (or the other way round) starts a batch of its own.
    let spec = spec("");
    let s = batching(&spec);
    let with_optional = |value: i32| {
        let (mut job, _) = job(value, 1, 2, vec![]);
        job.request
            .inputs
            .push(testing::int32_input("OPT", &[1, 1], &[value]));
        job
    };
    let jobs = vec![
        job(0, 1, 2, vec![]).0,
        with_optional(1),
        job(2, 1, 2, vec![]).0,
    ];
    let now = jobs[0].enqueued_at;
    assert_eq!(
        plan_batch(s, &spec, &queues_of(&spec, jobs), None, now),
        Plan::Execute(1)
    );
    let jobs = vec![with_optional(0), with_optional(1), job(2, 1, 2, vec![]).0];
    assert_eq!(
        plan_batch(s, &spec, &queues_of(&spec, jobs), None, now),
        Plan::Execute(2)
    );
}

/// A strategy taking requests while their input bytes fit a volume, as Triton's
/// `volume_batching` example does; it records each decision's calls.
struct Volume {
    limit: usize,
    calls: parking_lot::Mutex<Vec<String>>,
}

struct VolumeCut<'a> {
    strategy: &'a Volume,
    left: usize,
}

impl BatchStrategy for Volume {
    fn start_batch(&self) -> Box<dyn BatchCut + '_> {
        self.calls.lock().push("start".into());
        Box::new(VolumeCut {
            strategy: self,
            left: self.limit,
        })
    }
}

impl BatchCut for VolumeCut<'_> {
    fn include(&mut self, request: &crate::request::InferRequest) -> bool {
        let bytes: usize = request.inputs.iter().map(|i| i.data.len()).sum();
        let fits = bytes <= self.left;
        if fits {
            self.left -= bytes;
        }
        self.strategy
            .calls
            .lock()
            .push(format!("{}:{fits}", request.id));
        fits
    }
}

impl Drop for VolumeCut<'_> {
    fn drop(&mut self) {
        self.strategy.calls.lock().push("end".into());
    }
}

#[test]
fn a_custom_strategy_ends_a_batch_before_the_request_it_refuses() {
    let spec = spec("");
    let s = batching(&spec);
    // Four requests of 8 bytes (two INT32 each) under a 20-byte volume: two fit.
    let volume = Volume {
        limit: 20,
        calls: Default::default(),
    };
    let jobs: Vec<Job> = (0..4).map(|i| job(i, 1, 2, vec![]).0).collect();
    let now = jobs[0].enqueued_at;
    let q = queues_of(&spec, jobs);
    assert_eq!(
        plan_batch(s, &spec, &q, Some(&volume), now),
        Plan::Execute(2)
    );
    assert_eq!(
        *volume.calls.lock(),
        ["start", "0:true", "1:true", "2:false", "end"]
    );
    // The batcher's own limits come first: past max_batch_size the strategy is not asked.
    volume.calls.lock().clear();
    let jobs = vec![job(0, 5, 1, vec![]).0, job(1, 4, 1, vec![]).0];
    let q = queues_of(&spec, jobs);
    assert_eq!(
        plan_batch(s, &spec, &q, Some(&volume), now),
        Plan::Execute(1)
    );
    assert_eq!(*volume.calls.lock(), ["start", "0:true", "end"]);
    // A first request larger than any batch still runs, alone.
    let jobs = vec![job(0, 1, 8, vec![]).0, job(1, 1, 8, vec![]).0];
    let q = queues_of(&spec, jobs);
    assert_eq!(
        plan_batch(s, &spec, &q, Some(&volume), now),
        Plan::Execute(1)
    );
}

#[test]
fn queue_orders_by_priority_and_enforces_policies() {
    let spec = spec(
        "priority_levels: 2 default_priority_level: 2
         default_queue_policy { max_queue_size: 2 }
         priority_queue_policy { key: 1 value { default_timeout_microseconds: 1000 } }",
    );
    let mut q = PriorityQueues::new(batching(&spec));
    q.push(job(1, 1, 1, vec![]).0).expect("room");
    q.push(job(2, 1, 1, vec![("priority", ParamValue::Int(1))]).0)
        .expect("room");
    q.push(job(3, 1, 1, vec![]).0).expect("room");
    let refused = q.push(job(4, 1, 1, vec![]).0).expect_err("level 2 is full");
    assert_eq!(refused.request.id, "4");
    let order: Vec<&str> = q.iter().map(|j| j.request.id.as_str()).collect();
    assert_eq!(order, vec!["2", "1", "3"]);
    let rejected = q.expire(Instant::now() + Duration::from_millis(2));
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].request.id, "2");
}

/// The test backend echoing `IN` to `OUT`.
fn echo() -> TestBackend {
    TestBackend::echo(&[("IN", "OUT")])
}

/// A batcher over one instance of `backend`: the batcher and its statistics.
fn start_batcher(spec: Arc<ModelSpec>, backend: &TestBackend) -> (DynamicBatcher, Arc<ModelStats>) {
    start_hooked(spec, backend, Hooks::default())
}

/// [`start_batcher`] with test hooks.
fn start_hooked(
    spec: Arc<ModelSpec>,
    backend: &TestBackend,
    hooks: Hooks,
) -> (DynamicBatcher, Arc<ModelStats>) {
    let stats = Arc::new(ModelStats::default());
    let (sender, receiver) = InstancePool::channel(1);
    let pool = Arc::new(
        InstancePool::start(
            spec.clone(),
            stats.clone(),
            backend.instances("m", 1),
            receiver,
            &[],
        )
        .expect("starts"),
    );
    let batcher = DynamicBatcher::start_with(spec, sender, pool, 1, None, hooks).expect("starts");
    (batcher, stats)
}

/// A batcher over two instances of `backend` that wait for turns of `limiter`, each
/// needing its one resource `R`.
fn start_rate_limited(
    spec: Arc<ModelSpec>,
    backend: &TestBackend,
    limiter: &Arc<RateLimiter>,
    hooks: Hooks,
) -> DynamicBatcher {
    let instances = backend
        .instances("m", 2)
        .into_iter()
        .map(|mut instance| {
            instance.turn = Some(limiter.register(Some(&needs_r()), 0).expect("fits"));
            instance
        })
        .collect();
    let (sender, receiver) = InstancePool::channel(2);
    let stats = Arc::new(ModelStats::default());
    let pool = Arc::new(
        InstancePool::start(spec.clone(), stats, instances, receiver, &[]).expect("starts"),
    );
    DynamicBatcher::start_with(spec, sender, pool, 2, None, hooks).expect("starts")
}

/// One of resource `R`.
fn needs_r() -> ModelRateLimiter {
    ModelRateLimiter {
        resources: vec![Resource {
            name: "R".into(),
            global: false,
            count: 1,
        }],
        priority: 1,
    }
}

/// Stops the batcher off the runtime (stopping joins the instance threads).
async fn stop(batcher: DynamicBatcher) {
    tokio::task::spawn_blocking(move || batcher.stop())
        .await
        .expect("stops");
}

#[tokio::test(start_paused = true)]
async fn batcher_batches_waiting_requests_and_keeps_outputs_apart() {
    let backend = echo();
    let (batcher, stats) = start_batcher(spec("max_queue_delay_microseconds: 20000"), &backend);
    let mut answers = Vec::new();
    for i in 0..6 {
        let (j, rx) = job(i, 1, 3, vec![]);
        batcher.enqueue(j).expect("queued");
        answers.push((i, rx));
    }
    for (i, rx) in answers {
        let response = rx.await.expect("answered").expect("ok");
        assert_eq!(response.id, i.to_string());
        let expected: Vec<u8> = (0..3).flat_map(|_| i.to_le_bytes()).collect();
        assert_eq!(&response.outputs[0].data[..], &expected[..]);
        assert_eq!(response.outputs[0].shape, vec![1, 3]);
    }
    let sizes = backend.batch_sizes();
    assert_eq!(sizes.iter().sum::<usize>(), 6);
    assert!(
        sizes.iter().any(|&s| s > 1),
        "requests were batched: {sizes:?}"
    );
    stop(batcher).await;
    assert_eq!(stats.snapshot("m", 1).inference_count, 6);
}

#[tokio::test(start_paused = true)]
async fn batcher_rejects_timed_out_requests() {
    let (batcher, stats) = start_batcher(
        spec(
            "max_queue_delay_microseconds: 1000000 preferred_batch_size: [ 8 ]
         default_queue_policy { default_timeout_microseconds: 5000 }",
        ),
        &echo(),
    );
    let (j, rx) = counted(job(1, 1, 1, vec![]), &stats);
    batcher.enqueue(j).expect("queued");
    let err = rx.await.expect("answered").expect_err("times out");
    assert_eq!(err.message(), "Request timeout expired");
    assert_eq!(stats.snapshot("m", 1).failures[3], 1);
    stop(batcher).await;
}

#[tokio::test(start_paused = true)]
async fn requests_arriving_while_the_instance_is_busy_form_the_next_batch() {
    // No queue delay: a batch is cut as soon as the instance is free, not before. The
    // delay is real time (the instance is an OS thread): long enough to queue three jobs.
    let backend = echo().with_delay(Duration::from_millis(50));
    let (batcher, _) = start_batcher(spec(""), &backend);
    let (first, answer) = job(1, 1, 1, vec![]);
    batcher.enqueue(first).expect("queued");
    while backend.executions().is_empty() {
        tokio::task::yield_now().await;
    }
    let mut answers = vec![answer];
    for i in 2..5 {
        let (j, rx) = job(i, 1, 1, vec![]);
        batcher.enqueue(j).expect("queued");
        answers.push(rx);
    }
    for rx in answers {
        rx.await.expect("answered").expect("ok");
    }
    let executions = backend.executions();
    let ids: Vec<Vec<&str>> = executions
        .iter()
        .map(|e| e.ids.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(ids, vec![vec!["1"], vec!["2", "3", "4"]]);
    assert!(executions.iter().all(|e| e.instance == "m_0"));
    stop(batcher).await;
}

#[tokio::test(start_paused = true)]
async fn failures_are_answered_per_request_of_a_batch() {
    let backend = echo().failing_on(2, crate::error::Error::internal("boom"));
    let (batcher, stats) = start_batcher(spec("max_queue_delay_microseconds: 1000"), &backend);
    let answers: Vec<_> = (1..4)
        .map(|i| {
            let (j, rx) = counted(job(i, 1, 2, vec![]), &stats);
            batcher.enqueue(j).expect("queued");
            rx
        })
        .collect();
    let mut results = Vec::new();
    for rx in answers {
        results.push(
            rx.await
                .expect("answered")
                .map(|r| testing::int32s(&r.outputs[0].data)),
        );
    }
    assert_eq!(results[0].as_ref().expect("ok"), &vec![1, 1]);
    assert_eq!(results[1].as_ref().expect_err("marked").message(), "boom");
    assert_eq!(results[2].as_ref().expect("ok"), &vec![3, 3]);
    assert_eq!(backend.batch_sizes(), vec![3], "one batch");
    stop(batcher).await;
    let s = stats.snapshot("m", 1);
    assert_eq!(
        (s.inference_stats.success.count, s.failures),
        (2, [1, 0, 0, 0])
    );

    // A backend that fails everything answers each request with its error.
    let backend = echo().failing(crate::error::Error::unavailable("down"));
    let (batcher, _) = start_batcher(spec("max_queue_delay_microseconds: 1000"), &backend);
    let (j, rx) = job(1, 2, 1, vec![]);
    batcher.enqueue(j).expect("queued");
    let e = rx.await.expect("answered").expect_err("fails");
    assert_eq!(
        (e.kind(), e.message()),
        (crate::error::ErrorKind::Unavailable, "down")
    );
    stop(batcher).await;
}

#[tokio::test(start_paused = true)]
async fn delay_hook_holds_the_batcher_until_enough_requests_are_queued_once() {
    // Without the hook each request would run alone at once (no queue delay, a free
    // instance); with TRITONSERVER_DELAY_SCHEDULER=3 the first three run as one batch.
    let backend = echo();
    let hooks = Hooks {
        queued: 3,
        backlog: 0,
    };
    let (batcher, _) = start_hooked(spec(""), &backend, hooks);
    let mut answers = Vec::new();
    for i in 1..3 {
        let (j, rx) = job(i, 1, 1, vec![]);
        batcher.enqueue(j).expect("queued");
        answers.push(rx);
    }
    // No timeout ends the hold.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(backend.executions().is_empty(), "held with 2 of 3 queued");
    let (j, rx) = job(3, 1, 1, vec![]);
    batcher.enqueue(j).expect("queued");
    answers.push(rx);
    for rx in answers {
        rx.await.expect("answered").expect("ok");
    }
    assert_eq!(backend.batch_sizes(), vec![3]);
    // Lifted for good: a lone request now runs at once.
    let (j, rx) = job(4, 1, 1, vec![]);
    batcher.enqueue(j).expect("queued");
    rx.await.expect("answered").expect("ok");
    assert_eq!(backend.batch_sizes(), vec![3, 1]);
    stop(batcher).await;
}

#[tokio::test(start_paused = true)]
async fn stopping_lifts_the_delay_hook_so_queued_requests_drain() {
    let backend = echo();
    let hooks = Hooks {
        queued: 5,
        backlog: 0,
    };
    let (batcher, _) = start_hooked(spec(""), &backend, hooks);
    let (j, rx) = job(1, 1, 1, vec![]);
    batcher.enqueue(j).expect("queued");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(backend.executions().is_empty());
    stop(batcher).await;
    rx.await.expect("answered").expect("ok");
}

#[tokio::test(start_paused = true)]
async fn pending_counts_queued_requests_not_executing_ones() {
    // Real-time delay: the instance is an OS thread. While it runs the first request,
    // the next two wait in the queue: two pending, as Triton counts them.
    let backend = echo().with_delay(Duration::from_millis(200));
    let (batcher, stats) = start_batcher(spec(""), &backend);
    let pending = || stats.snapshot("m", 1).pending;
    let (first, answer) = counted(job(1, 1, 1, vec![]), &stats);
    batcher.enqueue(first).expect("queued");
    while backend.executions().is_empty() {
        tokio::task::yield_now().await;
    }
    assert_eq!(pending(), 0, "an executing request is not pending");
    let mut answers = vec![answer];
    for i in 2..4 {
        let (j, rx) = counted(job(i, 1, 1, vec![]), &stats);
        batcher.enqueue(j).expect("queued");
        answers.push(rx);
    }
    assert_eq!(pending(), 2);
    for rx in answers {
        rx.await.expect("answered").expect("ok");
    }
    assert_eq!(pending(), 0);
    stop(batcher).await;
}

#[tokio::test]
async fn a_batch_waiting_for_its_rate_limiter_turn_takes_requests_that_arrive_meanwhile() {
    // L0_rate_limiter's dynamic batching case: preferred sizes 1 to 4 and a long delay,
    // instances that cannot run at once. A batch cut at size 1 for an instance that must
    // wait for its turn grows to 4 with the requests that arrive before the turn comes,
    // as Triton's payload does, instead of running alone.
    let spec = spec("preferred_batch_size: [ 1, 2, 3, 4 ] max_queue_delay_microseconds: 5000000");
    let backend = echo();
    let limiter = RateLimiter::new(Vec::new());
    // The test holds the only `R` until it lets go, so no instance can start meanwhile.
    let holder = limiter.register(Some(&needs_r()), 0).expect("fits");
    let (hold, release) = std::sync::mpsc::channel::<()>();
    let (held, is_held) = std::sync::mpsc::channel::<()>();
    let holding = std::thread::spawn(move || {
        holder.run(|| {
            held.send(()).expect("test waits");
            release.recv().ok();
        })
    });
    is_held.recv().expect("holding R");
    let hooks = Hooks {
        queued: 5,
        backlog: 0,
    };
    let batcher = start_rate_limited(spec, &backend, &limiter, hooks);
    let mut answers = Vec::new();
    for i in 0..5 {
        let (j, rx) = job(i, 1, 1, vec![]);
        batcher.enqueue(j).expect("queued");
        answers.push(rx);
    }
    // Cut as 4 and 1, both waiting for a turn; three more arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 5..8 {
        let (j, rx) = job(i, 1, 1, vec![]);
        batcher.enqueue(j).expect("queued");
        answers.push(rx);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    hold.send(()).expect("holder waits");
    holding.join().expect("released");
    for rx in answers {
        rx.await.expect("answered").expect("ok");
    }
    assert_eq!(backend.batch_sizes(), vec![4, 4]);
    stop(batcher).await;
}

#[test]
fn a_waiting_batch_grows_by_the_batchers_rules_counted_from_its_size() {
    let spec = spec("preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100000");
    let s = batching(&spec);
    let first = job(0, 1, 2, vec![]).0.request.inputs;
    let jobs: Vec<Job> = (1..4).map(|i| job(i, 1, 2, vec![]).0).collect();
    let now = jobs[0].enqueued_at;
    let q = queues_of(&spec, jobs);
    // Size 1 + 3 queued reaches the preferred 4; it stays open (a delay is set).
    assert_eq!(
        plan_growth(s, &spec, &first, 1, &q, now),
        Growth::Add {
            take: 3,
            full: false
        }
    );
    // At 4 the next would outgrow every preferred size: full, nothing taken.
    assert_eq!(
        plan_growth(s, &spec, &first, 4, &q, now),
        Growth::Add {
            take: 0,
            full: true
        }
    );
    // At the preferred 2 with one queued (3 is not preferred), it waits for the delay.
    let lone = job(5, 1, 2, vec![]).0;
    let at = lone.enqueued_at;
    let one = queues_of(&spec, vec![lone]);
    assert_eq!(
        plan_growth(s, &spec, &first, 2, &one, at),
        Growth::WaitUntil(at + Duration::from_millis(100))
    );
    // A request of another shape never joins.
    let other = queues_of(&spec, vec![job(6, 1, 3, vec![]).0]);
    assert_eq!(
        plan_growth(s, &spec, &first, 1, &other, now),
        Growth::Add {
            take: 0,
            full: true
        }
    );
}
