//! Tests of the dynamic batcher: the queue, the batch plan, and the running task with a
//! fake instance under paused time.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::plan::{plan_batch, Plan};
use super::queue::PriorityQueues;
use super::{DynamicBatcher, Settings};
use crate::backend::{ComputeTiming, InstanceBackend};
use crate::batch::Batch;
use crate::config::{normalize_and_validate, parse_model_config, NormalizeOptions};
use crate::error::Result;
use crate::model::{DynamicBatchingSpec, ModelSpec, SchedulingSpec};
use crate::request::{InferRequest, InferResponse, InputTensor, OutputTensor, ParamValue};
use crate::scheduler::{InstancePool, Job, Reply, Scheduler};
use crate::stats::{FailureReason, ModelStats, RequestRecord};
use crate::DataType;

fn spec(batching: &str) -> Arc<ModelSpec> {
    let text = format!(
        r#"backend: "fake" max_batch_size: 8
           input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
           output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }} ]
           dynamic_batching {{ {batching} }}"#
    );
    let mut config = parse_model_config(Path::new("config.pbtxt"), &text).expect("valid");
    normalize_and_validate(&mut config, "m", NormalizeOptions::default()).expect("valid");
    Arc::new(ModelSpec::new(config, 1).expect("valid"))
}

fn batching(spec: &ModelSpec) -> &DynamicBatchingSpec {
    match &spec.scheduling {
        SchedulingSpec::Dynamic(d) => d,
        _ => unreachable!("the test spec batches"),
    }
}

fn settings(spec: &ModelSpec) -> Settings {
    Settings::new(spec, batching(spec))
}

fn job(
    value: i32,
    batch: usize,
    width: usize,
    params: Vec<(&str, ParamValue)>,
) -> (Job, oneshot::Receiver<Result<InferResponse>>) {
    let (tx, rx) = oneshot::channel();
    let data: Vec<u8> = (0..batch * width)
        .flat_map(|_| value.to_le_bytes())
        .collect();
    let request = InferRequest {
        model_name: "m".into(),
        id: value.to_string(),
        parameters: params
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        inputs: vec![InputTensor {
            name: "IN".into(),
            datatype: DataType::Int32,
            shape: vec![batch as i64, width as i64],
            data: Bytes::from(data),
        }],
        ..Default::default()
    };
    let now = Instant::now();
    let job = Job {
        request,
        batch_size: batch,
        reply: Reply::new(tx),
        record: RequestRecord::untracked(now),
        enqueued_at: now,
        span: tracing::Span::none(),
        padding: false,
        on_outputs: None,
    };
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
    let s = settings(&spec);
    let jobs: Vec<Job> = (0..5).map(|i| job(i, 1, 2, vec![]).0).collect();
    let now = jobs[0].enqueued_at;
    let q = queues_of(&spec, jobs);
    assert_eq!(plan_batch(&s, &spec, &q, now), Plan::Execute(4));
    let jobs: Vec<Job> = (0..3).map(|i| job(i, 1, 2, vec![]).0).collect();
    let now = jobs[0].enqueued_at;
    let q = queues_of(&spec, jobs);
    assert_eq!(
        plan_batch(&s, &spec, &q, now),
        Plan::WaitUntil(now + Duration::from_millis(100))
    );
    // Once the delay has passed, the largest preferred size that fits is cut.
    assert_eq!(
        plan_batch(&s, &spec, &q, now + Duration::from_millis(100)),
        Plan::Execute(2)
    );
}

#[test]
fn plan_respects_max_batch_size_and_shapes() {
    let spec = spec("");
    let s = settings(&spec);
    let jobs = vec![job(0, 5, 2, vec![]).0, job(1, 4, 2, vec![]).0];
    let now = jobs[0].enqueued_at;
    assert_eq!(
        plan_batch(&s, &spec, &queues_of(&spec, jobs), now),
        Plan::Execute(1)
    );
    let jobs = vec![
        job(0, 1, 2, vec![]).0,
        job(1, 1, 3, vec![]).0,
        job(2, 1, 2, vec![]).0,
    ];
    assert_eq!(
        plan_batch(&s, &spec, &queues_of(&spec, jobs), now),
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

/// An instance that echoes its input and records the batch sizes it saw.
struct Echo {
    seen: Arc<parking_lot::Mutex<Vec<usize>>>,
}

impl InstanceBackend for Echo {
    fn execute(
        &mut self,
        batch: &Batch<'_>,
        _: &mut ComputeTiming,
    ) -> Vec<Result<Vec<OutputTensor>>> {
        self.seen.lock().push(batch.total_batch_size());
        let input = batch.gather_input("IN").expect("valid").expect("present");
        batch.scatter(vec![OutputTensor {
            name: "OUT".into(),
            datatype: DataType::Int32,
            shape: input.shape,
            data: input.data,
        }])
    }
}

/// A batcher over one `Echo` instance: the batcher, its statistics and the batch sizes seen.
fn start_batcher(
    spec: Arc<ModelSpec>,
) -> (
    DynamicBatcher,
    Arc<ModelStats>,
    Arc<parking_lot::Mutex<Vec<usize>>>,
) {
    let stats = Arc::new(ModelStats::default());
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (sender, receiver) = InstancePool::channel(1);
    let echo = Box::new(Echo { seen: seen.clone() }) as Box<dyn InstanceBackend>;
    let pool = InstancePool::start(
        spec.clone(),
        stats.clone(),
        vec![("m_0".into(), echo)],
        receiver,
    )
    .expect("starts");
    let batcher = DynamicBatcher::start(spec, sender, pool, 1).expect("starts");
    (batcher, stats, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batcher_batches_waiting_requests_and_keeps_outputs_apart() {
    let (batcher, stats, seen) = start_batcher(spec("max_queue_delay_microseconds: 20000"));
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
    let sizes = seen.lock().clone();
    assert_eq!(sizes.iter().sum::<usize>(), 6);
    assert!(
        sizes.iter().any(|&s| s > 1),
        "requests were batched: {sizes:?}"
    );
    tokio::task::spawn_blocking(move || batcher.stop())
        .await
        .expect("stops");
    assert_eq!(stats.snapshot("m", 1).inference_count, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batcher_rejects_timed_out_requests() {
    let (batcher, stats, _) = start_batcher(spec(
        "max_queue_delay_microseconds: 1000000 preferred_batch_size: [ 8 ]
         default_queue_policy { default_timeout_microseconds: 5000 }",
    ));
    let (mut j, rx) = job(1, 1, 1, vec![]);
    j.record = RequestRecord::open(stats.clone(), Instant::now(), None, FailureReason::Rejected);
    batcher.enqueue(j).expect("queued");
    let err = rx.await.expect("answered").expect_err("times out");
    assert_eq!(err.message(), "Request timeout expired");
    assert_eq!(stats.snapshot("m", 1).failures[3], 1);
    tokio::task::spawn_blocking(move || batcher.stop())
        .await
        .expect("stops");
}
