//! Measurement: latency histograms per window, the stability rule, and server-side
//! statistics deltas.
//!
//! Workers record each answered request into the current [`Window`] of a shared
//! [`Recorder`]; the step controller closes a window every measurement interval. A sample
//! belongs to the window in which its response arrived, as in perf_analyzer.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

/// Significant decimal digits of the latency histograms: 0.1 % resolution.
const SIGNIFICANT_DIGITS: u8 = 3;

/// A fresh latency histogram in nanoseconds that grows to fit any value.
fn new_histogram() -> Histogram<u64> {
    Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is within hdrhistogram's 0..=5")
}

/// What happened during one measurement window.
#[derive(Clone, Debug)]
pub struct Window {
    /// Latencies of successful requests, in nanoseconds.
    pub latencies: Histogram<u64>,
    /// Exact sum of those latencies, for the average.
    pub latency_sum_ns: u128,
    /// Batch elements (inferences) of the successful requests.
    pub inferences: u64,
    /// Requests the server answered with an error or that failed on the wire.
    pub errors: u64,
    /// Open loop only: requests sent later than scheduled because every slot was busy.
    pub delayed: u64,
    /// Open loop only: requests scheduled in this window.
    pub scheduled: u64,
    /// Wall-clock length of the window.
    pub duration: Duration,
}

impl Window {
    fn new() -> Self {
        Self {
            latencies: new_histogram(),
            latency_sum_ns: 0,
            inferences: 0,
            errors: 0,
            delayed: 0,
            scheduled: 0,
            duration: Duration::ZERO,
        }
    }

    /// Inferences per second (batch elements, like perf_analyzer's throughput).
    pub fn throughput(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.inferences as f64 / secs
        } else {
            0.0
        }
    }
}

/// The current window, shared by all workers of a step. A `parking_lot` mutex: the
/// critical section is one histogram update, far shorter than any request.
pub struct Recorder {
    current: Mutex<(Window, Instant)>,
    /// The first error message of the step, shown to the user (guarded separately so the
    /// string work stays off the sample path).
    first_error: Mutex<Option<String>>,
}

impl Recorder {
    /// A recorder whose first window starts now.
    pub fn new() -> Self {
        Self {
            current: Mutex::new((Window::new(), Instant::now())),
            first_error: Mutex::new(None),
        }
    }

    /// Records a successful request of `batch` inferences.
    pub fn success(&self, latency: Duration, batch: u64) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let mut guard = self.current.lock();
        let w = &mut guard.0;
        // Recording only fails for values beyond the histogram's range, which auto-resize removes.
        let _ = w.latencies.record(ns.max(1));
        w.latency_sum_ns += u128::from(ns);
        w.inferences += batch;
    }

    /// Records a failed request.
    pub fn error(&self, message: &dyn std::fmt::Display) {
        self.current.lock().0.errors += 1;
        let mut first = self.first_error.lock();
        if first.is_none() {
            *first = Some(message.to_string());
        }
    }

    /// Records that the open loop scheduled a request, and whether it went out late.
    pub fn scheduled(&self, delayed: bool) {
        let mut guard = self.current.lock();
        guard.0.scheduled += 1;
        guard.0.delayed += u64::from(delayed);
    }

    /// Closes the current window and starts the next one.
    pub fn take(&self) -> Window {
        let now = Instant::now();
        let mut guard = self.current.lock();
        let (mut window, started) = std::mem::replace(&mut *guard, (Window::new(), now));
        window.duration = now.saturating_duration_since(started);
        window
    }

    /// The first error message seen, if any.
    pub fn first_error(&self) -> Option<String> {
        self.first_error.lock().clone()
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

/// True when every value lies within `percentage` % of the values' mean. An all-zero set
/// is stable (nothing completes, consistently); an empty set is not.
pub fn is_stable(values: &[f64], percentage: f64) -> bool {
    if values.is_empty() {
        return false;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let allowed = mean.abs() * percentage / 100.0;
    values.iter().all(|v| (v - mean).abs() <= allowed)
}

/// Client-side results over the reported windows.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ClientSummary {
    /// Successful requests.
    pub requests: u64,
    /// Inferences per second.
    pub throughput: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 90th percentile latency, µs.
    pub p90_us: f64,
    /// 95th percentile latency, µs.
    pub p95_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Mean latency, µs.
    pub avg_us: f64,
    /// Failed requests.
    pub errors: u64,
    /// Open loop: fraction of scheduled requests sent late, 0..1.
    pub delayed_fraction: f64,
}

impl ClientSummary {
    /// Merges windows: throughput is total inferences over total time, percentiles come
    /// from the merged histogram.
    pub fn from_windows(windows: &[Window]) -> Self {
        let mut merged = new_histogram();
        let (mut sum_ns, mut inferences, mut errors) = (0u128, 0u64, 0u64);
        let (mut delayed, mut scheduled) = (0u64, 0u64);
        let mut secs = 0.0;
        for w in windows {
            // Adding only fails when the target cannot grow, and ours auto-resizes.
            let _ = merged.add(&w.latencies);
            sum_ns += w.latency_sum_ns;
            inferences += w.inferences;
            errors += w.errors;
            delayed += w.delayed;
            scheduled += w.scheduled;
            secs += w.duration.as_secs_f64();
        }
        let requests = merged.len();
        let us = |q: f64| {
            if requests == 0 {
                0.0
            } else {
                merged.value_at_quantile(q) as f64 / 1000.0
            }
        };
        Self {
            requests,
            throughput: if secs > 0.0 {
                inferences as f64 / secs
            } else {
                0.0
            },
            p50_us: us(0.50),
            p90_us: us(0.90),
            p95_us: us(0.95),
            p99_us: us(0.99),
            avg_us: if requests == 0 {
                0.0
            } else {
                sum_ns as f64 / requests as f64 / 1000.0
            },
            errors,
            delayed_fraction: if scheduled == 0 {
                0.0
            } else {
                delayed as f64 / scheduled as f64
            },
        }
    }
}

/// A count and total duration from the statistics extension.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Duration64 {
    /// Number of events.
    pub count: u64,
    /// Their total time in nanoseconds.
    pub ns: u64,
}

/// Cumulative server statistics of one model (summed over the versions the server reported).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Inferences (batch elements) run.
    pub inference_count: u64,
    /// Model executions (batches) run.
    pub execution_count: u64,
    /// Successful requests.
    pub success: Duration64,
    /// Time requests waited in the scheduler queue.
    pub queue: Duration64,
    /// Time spent preparing inputs.
    pub compute_input: Duration64,
    /// Time spent in the model.
    pub compute_infer: Duration64,
    /// Time spent producing outputs.
    pub compute_output: Duration64,
}

impl ServerStats {
    /// Adds another version's statistics.
    pub fn add(&mut self, other: &ServerStats) {
        fn add(a: &mut Duration64, b: &Duration64) {
            a.count += b.count;
            a.ns += b.ns;
        }
        self.inference_count += other.inference_count;
        self.execution_count += other.execution_count;
        add(&mut self.success, &other.success);
        add(&mut self.queue, &other.queue);
        add(&mut self.compute_input, &other.compute_input);
        add(&mut self.compute_infer, &other.compute_infer);
        add(&mut self.compute_output, &other.compute_output);
    }
}

/// Server-side averages over the reported windows.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ServerSummary {
    /// Requests the server completed successfully in the interval.
    pub requests: u64,
    /// Average queue time per request, µs.
    pub queue_us: f64,
    /// Average input preparation time per request, µs.
    pub compute_input_us: f64,
    /// Average model time per request, µs.
    pub compute_infer_us: f64,
    /// Average output time per request, µs.
    pub compute_output_us: f64,
    /// Average executed batch size: inferences per execution.
    pub avg_batch_size: f64,
}

impl ServerSummary {
    /// The averages between two cumulative snapshots. Counters that went backwards (the
    /// model was reloaded in between) count as zero.
    pub fn delta(before: &ServerStats, after: &ServerStats) -> Self {
        let per = |a: Duration64, b: Duration64| {
            let count = b.count.saturating_sub(a.count);
            if count == 0 {
                0.0
            } else {
                b.ns.saturating_sub(a.ns) as f64 / count as f64 / 1000.0
            }
        };
        let inferences = after.inference_count.saturating_sub(before.inference_count);
        let executions = after.execution_count.saturating_sub(before.execution_count);
        Self {
            requests: after.success.count.saturating_sub(before.success.count),
            queue_us: per(before.queue, after.queue),
            compute_input_us: per(before.compute_input, after.compute_input),
            compute_infer_us: per(before.compute_infer, after.compute_infer),
            compute_output_us: per(before.compute_output, after.compute_output),
            avg_batch_size: if executions == 0 {
                0.0
            } else {
                inferences as f64 / executions as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stability_rule() {
        assert!(is_stable(&[100.0, 105.0, 95.0], 10.0));
        assert!(!is_stable(&[100.0, 120.0, 95.0], 10.0));
        assert!(is_stable(&[0.0, 0.0, 0.0], 10.0));
        assert!(!is_stable(&[], 10.0));
        // Exactly on the boundary counts as stable.
        assert!(is_stable(&[90.0, 110.0], 10.0));
        assert!(!is_stable(&[100.0, 101.0], 0.1));
    }

    #[test]
    fn percentiles_of_a_uniform_sample() {
        let recorder = Recorder::new();
        for us in 1..=1000u64 {
            recorder.success(Duration::from_micros(us), 2);
        }
        recorder.error(&"boom");
        let mut w = recorder.take();
        w.duration = Duration::from_secs(2);
        let s = ClientSummary::from_windows(&[w]);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.002;
        assert_eq!(s.requests, 1000);
        assert!(close(s.p50_us, 500.0), "p50 {}", s.p50_us);
        assert!(close(s.p90_us, 900.0), "p90 {}", s.p90_us);
        assert!(close(s.p95_us, 950.0), "p95 {}", s.p95_us);
        assert!(close(s.p99_us, 990.0), "p99 {}", s.p99_us);
        assert!((s.avg_us - 500.5).abs() < 1e-9, "avg {}", s.avg_us);
        assert!((s.throughput - 1000.0).abs() < 1e-9);
        assert_eq!(s.errors, 1);
        assert_eq!(recorder.first_error().as_deref(), Some("boom"));
    }

    #[test]
    fn windows_merge_by_total_time() {
        let recorder = Recorder::new();
        recorder.success(Duration::from_micros(100), 1);
        let mut a = recorder.take();
        a.duration = Duration::from_secs(1);
        for _ in 0..3 {
            recorder.success(Duration::from_micros(300), 1);
        }
        let mut b = recorder.take();
        b.duration = Duration::from_secs(1);
        assert!((b.throughput() - 3.0).abs() < 1e-9);
        let s = ClientSummary::from_windows(&[a, b]);
        assert_eq!(s.requests, 4);
        assert!((s.throughput - 2.0).abs() < 1e-9);
        assert!((s.avg_us - 250.0).abs() < 1e-9);
        assert_eq!(ClientSummary::from_windows(&[]), ClientSummary::default());
    }

    #[test]
    fn server_delta_averages_per_request() {
        let before = ServerStats {
            inference_count: 10,
            execution_count: 5,
            success: Duration64 { count: 5, ns: 0 },
            queue: Duration64 {
                count: 5,
                ns: 5_000,
            },
            ..Default::default()
        };
        let after = ServerStats {
            inference_count: 50,
            execution_count: 10,
            success: Duration64 { count: 25, ns: 0 },
            queue: Duration64 {
                count: 25,
                ns: 45_000,
            },
            compute_infer: Duration64 {
                count: 20,
                ns: 200_000,
            },
            ..Default::default()
        };
        let d = ServerSummary::delta(&before, &after);
        assert_eq!(d.requests, 20);
        assert!((d.queue_us - 2.0).abs() < 1e-9);
        assert!((d.compute_infer_us - 10.0).abs() < 1e-9);
        assert_eq!(d.compute_input_us, 0.0);
        assert!((d.avg_batch_size - 8.0).abs() < 1e-9);
    }
}
