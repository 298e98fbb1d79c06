//! Per-model-version statistics, updated lock-free on the hot path and read by the
//! statistics extension and the metrics endpoint. The fields mirror Triton's
//! `ModelStatistics` so both frontends print the same numbers Triton would.

mod record;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

use crate::backend::{ComputeTiming, StateUsage};

pub use record::RequestRecord;

/// A sequence batcher's counts for the metrics (set by the batcher, read by snapshots).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Sequences started and not yet ended or released.
    pub active: u64,
    /// Sequences waiting for a slot.
    pub backlog: u64,
    /// Slots owned by a sequence.
    pub slots_used: u64,
    /// All slots.
    pub slots_total: u64,
}

/// Why a request failed, as the `reason` label of `nv_inference_request_failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// The backend failed to execute.
    Backend,
    /// Anything else (validation, internal).
    Other,
    /// The request was cancelled.
    Canceled,
    /// The scheduler refused it (queue full, timeout).
    Rejected,
}

impl FailureReason {
    /// All reasons, in metric order.
    pub const ALL: [FailureReason; 4] = [
        FailureReason::Backend,
        FailureReason::Other,
        FailureReason::Canceled,
        FailureReason::Rejected,
    ];

    /// The label value Triton uses.
    pub fn label(self) -> &'static str {
        match self {
            FailureReason::Backend => "BACKEND",
            FailureReason::Other => "OTHER",
            FailureReason::Canceled => "CANCELED",
            FailureReason::Rejected => "REJECTED",
        }
    }
}

/// A count and a total duration, Triton's `StatisticDuration`.
#[derive(Debug, Default)]
pub struct DurationCounter {
    count: AtomicU64,
    ns: AtomicU64,
}

impl DurationCounter {
    /// Adds one occurrence lasting `ns`.
    pub fn record(&self, ns: u64) {
        self.count.fetch_add(1, Relaxed);
        self.ns.fetch_add(ns, Relaxed);
    }

    /// The current values.
    pub fn snapshot(&self) -> StatDuration {
        StatDuration {
            count: self.count.load(Relaxed),
            ns: self.ns.load(Relaxed),
        }
    }
}

/// A read-out of a [`DurationCounter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatDuration {
    /// Number of occurrences.
    pub count: u64,
    /// Total nanoseconds.
    pub ns: u64,
}

/// Compute times of all executions of one batch size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BatchStat {
    /// The batch size.
    pub batch_size: u64,
    /// Input preparation.
    pub compute_input: StatDuration,
    /// Model execution.
    pub compute_infer: StatDuration,
    /// Output extraction.
    pub compute_output: StatDuration,
}

/// Live statistics of one model version.
#[derive(Debug, Default)]
pub struct ModelStats {
    success: DurationCounter,
    fail: DurationCounter,
    queue: DurationCounter,
    compute_input: DurationCounter,
    compute_infer: DurationCounter,
    compute_output: DurationCounter,
    cache_hit: DurationCounter,
    cache_miss: DurationCounter,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    last_inference_ms: AtomicU64,
    failures: [AtomicU64; 4],
    pending: AtomicI64,
    // Short critical section once per execution; never held across an await.
    batch_stats: Mutex<BTreeMap<u64, BatchStat>>,
    /// Slots and sequences, for models with the sequence batcher.
    sequences: Mutex<Option<Occupancy>>,
    /// State memory per instance, for backends that keep sequence state; written by the
    /// instance workers after each execution.
    state_usage: Mutex<BTreeMap<String, StateUsage>>,
}

/// Queue and compute times of the step requests of one ensemble request, summed. Triton
/// reports these sums as the ensemble's own queue and compute times; each step's model
/// adds its share when the step succeeds.
#[derive(Debug, Default)]
pub struct StepTimes {
    queue_ns: AtomicU64,
    input_ns: AtomicU64,
    infer_ns: AtomicU64,
    output_ns: AtomicU64,
}

impl StepTimes {
    /// Adds one step's queue time and compute phases.
    pub fn add(&self, queue: Duration, timing: ComputeTiming) {
        self.queue_ns.fetch_add(duration_ns(queue), Relaxed);
        self.input_ns.fetch_add(timing.input_ns, Relaxed);
        self.infer_ns.fetch_add(timing.infer_ns, Relaxed);
        self.output_ns.fetch_add(timing.output_ns, Relaxed);
    }

    /// The sums so far: queue time and compute phases.
    pub fn totals(&self) -> (Duration, ComputeTiming) {
        let timing = ComputeTiming {
            input_ns: self.input_ns.load(Relaxed),
            infer_ns: self.infer_ns.load(Relaxed),
            output_ns: self.output_ns.load(Relaxed),
            ran: None,
        };
        (Duration::from_nanos(self.queue_ns.load(Relaxed)), timing)
    }
}

/// Inference-level part of [`ModelStatsSnapshot`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct InferStats {
    /// Successful requests, end-to-end time inside the server.
    pub success: StatDuration,
    /// Failed requests.
    pub fail: StatDuration,
    /// Time waiting in the queue.
    pub queue: StatDuration,
    /// Input preparation per request.
    pub compute_input: StatDuration,
    /// Model execution per request.
    pub compute_infer: StatDuration,
    /// Output extraction per request.
    pub compute_output: StatDuration,
    /// Response-cache hits (lookup time).
    pub cache_hit: StatDuration,
    /// Response-cache misses (lookup + insert time).
    pub cache_miss: StatDuration,
}

/// A consistent-enough read-out of [`ModelStats`] for one model version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelStatsSnapshot {
    /// Model name.
    pub name: String,
    /// Version.
    pub version: i64,
    /// Milliseconds since the epoch of the last inference (0 if none).
    pub last_inference: u64,
    /// Batch elements inferred (a batch-4 request counts 4).
    pub inference_count: u64,
    /// Model executions.
    pub execution_count: u64,
    /// Request-level statistics.
    pub inference_stats: InferStats,
    /// Per executed batch size.
    pub batch_stats: Vec<BatchStat>,
    /// Failures per reason, in [`FailureReason::ALL`] order.
    pub failures: [u64; 4],
    /// Requests received but not yet answered.
    pub pending: u64,
    /// Whether the model uses the response cache (its cache metrics are exported then).
    pub cache_enabled: bool,
    /// Sequence batcher occupancy (sequence models only).
    pub sequences: Option<Occupancy>,
    /// State memory summed over the instances (backends that keep sequence state only).
    pub state_usage: Option<StateUsage>,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ModelStats {
    /// A request entered the model's scheduler.
    pub fn request_started(&self) {
        self.pending.fetch_add(1, Relaxed);
    }

    /// A request that entered the scheduler was answered successfully.
    pub fn request_succeeded(&self, total: Duration, queue: Duration, timing: ComputeTiming) {
        self.pending.fetch_sub(1, Relaxed);
        self.success.record(duration_ns(total));
        self.queue.record(duration_ns(queue));
        self.compute_input.record(timing.input_ns);
        self.compute_infer.record(timing.infer_ns);
        self.compute_output.record(timing.output_ns);
    }

    /// A request that entered the scheduler failed.
    pub fn request_failed(&self, total: Duration, reason: FailureReason) {
        self.pending.fetch_sub(1, Relaxed);
        self.fail.record(duration_ns(total));
        let index = FailureReason::ALL
            .iter()
            .position(|r| *r == reason)
            .expect("ALL lists every reason");
        self.failures[index].fetch_add(1, Relaxed);
    }

    /// A request was answered from the response cache after `lookup`; it counts as a
    /// success but not as an inference or execution (as in Triton).
    pub fn cache_hit(&self, total: Duration, lookup: Duration) {
        self.success.record(duration_ns(total));
        self.cache_hit.record(duration_ns(lookup));
    }

    /// A request missed the cache and its response was stored.
    pub fn cache_miss(&self, lookup_and_insert: Duration) {
        self.cache_miss.record(duration_ns(lookup_and_insert));
    }

    /// The sequence batcher's current slot and backlog counts.
    pub fn set_sequence_occupancy(&self, occupancy: Occupancy) {
        *self.sequences.lock() = Some(occupancy);
    }

    /// Instance `instance`'s current state memory.
    pub fn set_state_usage(&self, instance: &str, usage: StateUsage) {
        let mut all = self.state_usage.lock();
        match all.get_mut(instance) {
            Some(stored) => *stored = usage,
            None => {
                all.insert(instance.to_string(), usage);
            }
        }
    }

    /// One model execution of `batch_size` batch elements finished, `inferences` of them
    /// for clients: the sequence batcher's padding requests run in the batch (and count in
    /// `batch_stats`) but, as in Triton, are no inferences.
    pub fn execution_finished(&self, batch_size: usize, inferences: usize, timing: ComputeTiming) {
        let batch_size = batch_size as u64;
        self.inference_count.fetch_add(inferences as u64, Relaxed);
        self.execution_count.fetch_add(1, Relaxed);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.last_inference_ms.store(now_ms, Relaxed);
        let mut stats = self.batch_stats.lock();
        let entry = stats.entry(batch_size).or_insert(BatchStat {
            batch_size,
            ..Default::default()
        });
        for (d, ns) in [
            (&mut entry.compute_input, timing.input_ns),
            (&mut entry.compute_infer, timing.infer_ns),
            (&mut entry.compute_output, timing.output_ns),
        ] {
            d.count += 1;
            d.ns += ns;
        }
    }

    /// Reads every counter.
    pub fn snapshot(&self, name: &str, version: i64) -> ModelStatsSnapshot {
        ModelStatsSnapshot {
            name: name.to_string(),
            version,
            last_inference: self.last_inference_ms.load(Relaxed),
            inference_count: self.inference_count.load(Relaxed),
            execution_count: self.execution_count.load(Relaxed),
            inference_stats: InferStats {
                success: self.success.snapshot(),
                fail: self.fail.snapshot(),
                queue: self.queue.snapshot(),
                compute_input: self.compute_input.snapshot(),
                compute_infer: self.compute_infer.snapshot(),
                compute_output: self.compute_output.snapshot(),
                cache_hit: self.cache_hit.snapshot(),
                cache_miss: self.cache_miss.snapshot(),
            },
            batch_stats: self.batch_stats.lock().values().copied().collect(),
            failures: self.failures.each_ref().map(|f| f.load(Relaxed)),
            pending: u64::try_from(self.pending.load(Relaxed)).unwrap_or(0),
            sequences: *self.sequences.lock(),
            state_usage: self
                .state_usage
                .lock()
                .values()
                .copied()
                .reduce(|a, b| a + b),
            cache_enabled: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_requests_executions_and_batches() {
        let stats = ModelStats::default();
        let timing = ComputeTiming {
            input_ns: 1,
            infer_ns: 10,
            output_ns: 2,
            ran: None,
        };
        stats.request_started();
        stats.request_started();
        stats.execution_finished(3, 3, timing);
        stats.request_succeeded(Duration::from_nanos(100), Duration::from_nanos(5), timing);
        stats.request_failed(Duration::from_nanos(7), FailureReason::Backend);
        let s = stats.snapshot("m", 1);
        assert_eq!(s.inference_count, 3);
        assert_eq!(s.execution_count, 1);
        assert_eq!(
            s.inference_stats.success,
            StatDuration { count: 1, ns: 100 }
        );
        assert_eq!(s.inference_stats.fail.count, 1);
        assert_eq!(s.failures, [1, 0, 0, 0]);
        assert_eq!(s.pending, 0);
        assert_eq!(s.batch_stats[0].batch_size, 3);
        assert_eq!(
            s.batch_stats[0].compute_infer,
            StatDuration { count: 1, ns: 10 }
        );
    }
}
