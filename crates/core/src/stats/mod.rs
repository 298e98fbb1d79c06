//! Per-model-version statistics, updated lock-free on the hot path and read by the
//! statistics extension and the metrics endpoint. The fields mirror Triton's
//! `ModelStatistics` so both frontends print the same numbers Triton would.

mod devices;
pub mod histogram;
mod measured;
mod record;
mod responses;
pub mod summary;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;

pub use devices::{DeviceSnapshot, DeviceStats};
pub use histogram::FirstResponse;
use histogram::{Histogram, HistogramReading};
pub use measured::{ComputeTiming, StateUsage};
pub use record::RequestRecord;
pub use responses::{ResponseOutcome, ResponseStat, ResponseStats, ResponseTimes};
use summary::{Quantile, Summary, SummaryReading};

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

/// A per-model latency summary (Triton's `summary_latencies`), in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryKind {
    /// Successful requests, end to end (models without the response cache).
    Request,
    /// Time in the queue.
    Queue,
    /// Input preparation.
    ComputeInput,
    /// Model execution.
    ComputeInfer,
    /// Output extraction.
    ComputeOutput,
    /// Response-cache hits (cache-enabled models).
    CacheHit,
    /// Response-cache misses (cache-enabled models).
    CacheMiss,
}

/// The metrics-only readings of one model version (beside its [`ModelStatsSnapshot`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyMetrics {
    /// Whether the latency counters are exported (`counter_latencies`).
    pub counters: bool,
    /// Each enabled summary's reading, in [`SummaryKind`] order.
    pub summaries: Vec<(SummaryKind, SummaryReading)>,
    /// `nv_inference_first_response_histogram_ms`, with `histogram_latencies=true`.
    pub first_response: Option<HistogramReading>,
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
    /// `counter_latencies=false`: the latency counters are not exported.
    counters_off: bool,
    /// `summary_latencies=true`: the model's summaries, under one lock taken once per
    /// observed request.
    summaries: Option<Mutex<Vec<(SummaryKind, Summary)>>>,
    /// `histogram_latencies=true`: request to first response, in milliseconds.
    first_response: Option<Histogram>,
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
    /// Per-response statistics, for backends that report them.
    responses: ResponseStats,
    /// The share of the model's GPU instances, per GPU (for the metrics' `gpu_uuid`
    /// series); taken once by each GPU instance's worker.
    devices: Mutex<Vec<(u32, Arc<DeviceStats>)>>,
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
    /// Requests queued and not yet executing (nor ended).
    pub pending: u64,
    /// Whether the model uses the response cache (its cache metrics are exported then).
    pub cache_enabled: bool,
    /// Sequence batcher occupancy (sequence models only).
    pub sequences: Option<Occupancy>,
    /// State memory summed over the instances (backends that keep sequence state only).
    pub state_usage: Option<StateUsage>,
    /// Per response index, as reported by the backend (Triton's `response_stats`).
    pub response_stats: Vec<(String, ResponseStat)>,
    /// The GPU instances' share of the counts, per GPU in device order.
    pub devices: Vec<DeviceSnapshot>,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ModelStats {
    /// Statistics that export the latency counters when `counter_latencies`, and
    /// summaries with `quantiles` when given: as Triton's reporter, the request summary
    /// only without the response cache, the cache summaries only with it.
    pub fn new(
        counter_latencies: bool,
        quantiles: Option<&[Quantile]>,
        cache_enabled: bool,
    ) -> Self {
        let summaries = quantiles.map(|targets| {
            let now = Instant::now();
            let kinds: &[SummaryKind] = if cache_enabled {
                &[
                    SummaryKind::Queue,
                    SummaryKind::ComputeInput,
                    SummaryKind::ComputeInfer,
                    SummaryKind::ComputeOutput,
                    SummaryKind::CacheHit,
                    SummaryKind::CacheMiss,
                ]
            } else {
                &[
                    SummaryKind::Request,
                    SummaryKind::Queue,
                    SummaryKind::ComputeInput,
                    SummaryKind::ComputeInfer,
                    SummaryKind::ComputeOutput,
                ]
            };
            Mutex::new(
                kinds
                    .iter()
                    .map(|&k| (k, Summary::new(targets, now)))
                    .collect(),
            )
        });
        Self {
            counters_off: !counter_latencies,
            summaries,
            ..Default::default()
        }
    }

    /// These statistics with a first-response histogram (`histogram_latencies=true`).
    pub fn with_first_response(mut self, histogram: Histogram) -> Self {
        self.first_response = Some(histogram);
        self
    }

    /// Observes each `(kind, ns)` in the summaries that exist, in microseconds as Triton.
    fn observe(&self, values: &[(SummaryKind, u64)]) {
        let Some(summaries) = &self.summaries else {
            return;
        };
        let now = Instant::now();
        let mut summaries = summaries.lock();
        for &(kind, ns) in values {
            if let Some((_, summary)) = summaries.iter_mut().find(|(k, _)| *k == kind) {
                summary.observe((ns / 1000) as f64, now);
            }
        }
    }

    /// A request entered the model's scheduler: it is pending.
    pub fn request_started(&self) {
        self.pending.fetch_add(1, Relaxed);
    }

    /// A pending request left the queue: it executes, or ended without executing.
    pub fn request_left_queue(&self) {
        self.pending.fetch_sub(1, Relaxed);
    }

    /// A request that entered the scheduler was answered successfully.
    pub fn request_succeeded(&self, total: Duration, queue: Duration, timing: ComputeTiming) {
        let (total, queue) = (duration_ns(total), duration_ns(queue));
        self.success.record(total);
        self.queue.record(queue);
        self.compute_input.record(timing.input_ns);
        self.compute_infer.record(timing.infer_ns);
        self.compute_output.record(timing.output_ns);
        self.observe(&[
            (SummaryKind::Request, total),
            (SummaryKind::Queue, queue),
            (SummaryKind::ComputeInput, timing.input_ns),
            (SummaryKind::ComputeInfer, timing.infer_ns),
            (SummaryKind::ComputeOutput, timing.output_ns),
        ]);
    }

    /// A request that entered the scheduler failed.
    pub fn request_failed(&self, total: Duration, reason: FailureReason) {
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
        self.observe(&[(SummaryKind::CacheHit, duration_ns(lookup))]);
    }

    /// A request missed the cache and its response was stored.
    pub fn cache_miss(&self, lookup_and_insert: Duration) {
        self.cache_miss.record(duration_ns(lookup_and_insert));
        self.observe(&[(SummaryKind::CacheMiss, duration_ns(lookup_and_insert))]);
    }

    /// The metrics-only readings: whether latency counters are exported, the
    /// summaries' quantiles over their window, counts and sums, and the first-response
    /// histogram.
    pub fn latency_metrics(&self) -> LatencyMetrics {
        let now = Instant::now();
        LatencyMetrics {
            counters: !self.counters_off,
            summaries: self.summaries.as_ref().map_or_else(Vec::new, |s| {
                s.lock()
                    .iter_mut()
                    .map(|(kind, summary)| (*kind, summary.read(now)))
                    .collect()
            }),
            first_response: self.first_response.as_ref().map(Histogram::read),
        }
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
            response_stats: self.responses.snapshot(),
            devices: self
                .devices
                .lock()
                .iter()
                .map(|(id, stats)| stats.snapshot(*id))
                .collect(),
        }
    }

    /// Where a backend reports each response's timing.
    pub fn responses(&self) -> &ResponseStats {
        &self.responses
    }

    /// The counters of this model's instances on GPU `device` (made on first use).
    pub fn on_device(&self, device: u32) -> Arc<DeviceStats> {
        let mut devices = self.devices.lock();
        if let Some((_, stats)) = devices.iter().find(|(id, _)| *id == device) {
            return stats.clone();
        }
        let stats = Arc::new(DeviceStats::default());
        devices.push((device, stats.clone()));
        devices.sort_by_key(|(id, _)| *id);
        stats
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
        stats.request_left_queue();
        assert_eq!(stats.snapshot("m", 1).pending, 1);
        stats.request_left_queue();
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

    #[test]
    fn summaries_follow_the_reporter_config() {
        let targets = [summary::Quantile {
            quantile: 0.5,
            error: 0.05,
        }];
        let stats = ModelStats::new(false, Some(&targets), false);
        let timing = ComputeTiming {
            infer_ns: 7_000,
            ..Default::default()
        };
        for total_us in [100, 300] {
            stats.request_started();
            stats.request_left_queue();
            let total = Duration::from_micros(total_us);
            stats.request_succeeded(total, Duration::from_micros(2), timing);
        }
        let metrics = stats.latency_metrics();
        assert!(!metrics.counters);
        let kinds: Vec<SummaryKind> = metrics.summaries.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds[0], SummaryKind::Request);
        assert_eq!(kinds.len(), 5);
        let (_, request) = &metrics.summaries[0];
        assert_eq!((request.count, request.sum), (2, 400.0));
        assert_eq!(request.quantiles, vec![(0.5, Some(100.0))]);
        let (_, infer) = &metrics.summaries[3];
        assert_eq!((infer.count, infer.sum), (2, 14.0));

        let cached = ModelStats::new(true, Some(&targets), true);
        cached.cache_hit(Duration::from_micros(9), Duration::from_micros(4));
        let metrics = cached.latency_metrics();
        assert!(metrics.counters);
        assert!(metrics
            .summaries
            .iter()
            .all(|(k, _)| *k != SummaryKind::Request));
        let hit = metrics
            .summaries
            .iter()
            .find(|(k, _)| *k == SummaryKind::CacheHit);
        assert_eq!(hit.map(|(_, r)| r.count), Some(1));
        assert!(ModelStats::default().latency_metrics().summaries.is_empty());
    }
}
