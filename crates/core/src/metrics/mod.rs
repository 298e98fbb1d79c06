//! Prometheus text exposition with Triton's metric names and labels, rendered at scrape
//! time from the per-model statistics (so the hot path updates one set of counters).
//! Which latency families appear is `--metrics-config`'s choice ([`MetricsConfig`]).

mod config;
pub mod text;

use std::time::Duration;

use crate::cache::stats::CacheSnapshot;
use crate::stats::histogram::{HistogramReading, FIRST_RESPONSE_FAMILY};
use crate::stats::summary::SummaryReading;
use crate::stats::{
    DeviceSnapshot, FailureReason, LatencyMetrics, ModelStatsSnapshot, Occupancy, StateUsage,
    SummaryKind,
};

pub use config::MetricsConfig;

use self::text::{with_label, Family, Kind, Labels, SampleValue};

/// What the metrics endpoint exports for one model version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelMetrics {
    /// Its statistics.
    pub stats: ModelStatsSnapshot,
    /// Its latency summaries, and whether latency counters are exported.
    pub latency: LatencyMetrics,
    /// How long its load took.
    pub load_duration: Duration,
}

/// A family read from each model's statistics: `value` over all its instances, `device`
/// the share of its instances on one GPU (exported as that GPU's series, and left out of
/// the model's own, as Triton's per-instance reporters do), both in units of `per`.
struct PerModel {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    value: fn(&ModelStatsSnapshot) -> u64,
    device: Option<fn(&DeviceSnapshot) -> u64>,
    per: u64,
}

const FAMILIES: &[PerModel] = &[
    PerModel {
        name: "nv_inference_request_success",
        help: "Number of successful inference requests, all batch sizes",
        kind: Kind::Counter,
        value: |s| s.inference_stats.success.count,
        device: Some(|d| d.success.count),
        per: 1,
    },
    PerModel {
        name: "nv_inference_count",
        help: "Number of inferences performed (does not include cached requests)",
        kind: Kind::Counter,
        value: |s| s.inference_count,
        device: Some(|d| d.inference_count),
        per: 1,
    },
    PerModel {
        name: "nv_inference_exec_count",
        help: "Number of model executions performed (does not include cached requests)",
        kind: Kind::Counter,
        value: |s| s.execution_count,
        device: Some(|d| d.execution_count),
        per: 1,
    },
    PerModel {
        name: "nv_inference_pending_request_count",
        help: "Instantaneous number of pending requests awaiting execution per-model.",
        kind: Kind::Gauge,
        value: |s| s.pending,
        device: None,
        per: 1,
    },
];

/// The latency counters, exported unless `counter_latencies=false`.
const LATENCY_COUNTERS: &[PerModel] = &[
    PerModel {
        name: "nv_inference_request_duration_us",
        help: "Cumulative inference request duration in microseconds (includes cached requests)",
        kind: Kind::Counter,
        value: |s| s.inference_stats.success.ns,
        device: Some(|d| d.success.ns),
        per: 1000,
    },
    PerModel {
        name: "nv_inference_queue_duration_us",
        help: "Cumulative inference queuing duration in microseconds (includes cached requests)",
        kind: Kind::Counter,
        value: |s| s.inference_stats.queue.ns,
        device: Some(|d| d.queue.ns),
        per: 1000,
    },
    PerModel {
        name: "nv_inference_compute_input_duration_us",
        help: "Cumulative compute input duration in microseconds (does not include cached requests)",
        kind: Kind::Counter,
        value: |s| s.inference_stats.compute_input.ns,
        device: Some(|d| d.compute_input.ns),
        per: 1000,
    },
    PerModel {
        name: "nv_inference_compute_infer_duration_us",
        help: "Cumulative compute inference duration in microseconds (does not include cached requests)",
        kind: Kind::Counter,
        value: |s| s.inference_stats.compute_infer.ns,
        device: Some(|d| d.compute_infer.ns),
        per: 1000,
    },
    PerModel {
        name: "nv_inference_compute_output_duration_us",
        help: "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        kind: Kind::Counter,
        value: |s| s.inference_stats.compute_output.ns,
        device: Some(|d| d.compute_output.ns),
        per: 1000,
    },
];

/// Per-model cache families, exported only for models that use the cache (as Triton),
/// and like the latency counters only unless `counter_latencies=false`.
const CACHE_FAMILIES: &[PerModel] = &[
    PerModel {
        name: "nv_cache_num_hits_per_model",
        help: "Number of cache hits per model",
        kind: Kind::Counter,
        value: |s| s.inference_stats.cache_hit.count,
        device: None,
        per: 1,
    },
    PerModel {
        name: "nv_cache_num_misses_per_model",
        help: "Number of cache misses per model",
        kind: Kind::Counter,
        value: |s| s.inference_stats.cache_miss.count,
        device: None,
        per: 1,
    },
    PerModel {
        name: "nv_cache_hit_duration_per_model",
        help: "Total cache hit duration per model, in microseconds",
        kind: Kind::Counter,
        value: |s| s.inference_stats.cache_hit.ns,
        device: None,
        per: 1000,
    },
    PerModel {
        name: "nv_cache_miss_duration_per_model",
        help: "Total cache miss (insert+lookup) duration per model, in microseconds",
        kind: Kind::Counter,
        value: |s| s.inference_stats.cache_miss.ns,
        device: None,
        per: 1000,
    },
];

/// Renders the metrics of `models` (and of the local response cache, when there is one)
/// in the Prometheus text format.
pub fn render(models: &[ModelMetrics], cache: Option<&CacheSnapshot>) -> String {
    let mut out = String::new();
    let stats: Vec<&ModelStatsSnapshot> = models.iter().map(|m| &m.stats).collect();
    // Read from the CUDA driver once per scrape, for every family.
    let uuids = GpuUuids::of(stats.iter().copied());
    write_failures(&mut out, &stats, &uuids);
    write_families(&mut out, FAMILIES, stats.iter().copied(), &uuids);
    let counted: Vec<&ModelMetrics> = models.iter().filter(|m| m.latency.counters).collect();
    if !counted.is_empty() {
        write_families(
            &mut out,
            LATENCY_COUNTERS,
            counted.iter().map(|m| &m.stats),
            &uuids,
        );
    }
    let cached = counted.iter().filter(|m| m.stats.cache_enabled);
    if cached.clone().next().is_some() {
        write_families(&mut out, CACHE_FAMILIES, cached.map(|m| &m.stats), &uuids);
    }
    write_summaries(&mut out, models);
    write_first_response(&mut out, models);
    write_load_durations(&mut out, models);
    if let Some(cache) = cache {
        write_cache(&mut out, cache);
    }
    write_gauges(&mut out, &SEQUENCE_GAUGES, &stats, |m| m.sequences);
    write_gauges(&mut out, &STATE_GAUGES, &stats, |m| m.state_usage);
    write_pinned_pool(&mut out);
    out
}

/// Triton's pinned memory pool gauges, which it always exports with its metrics
/// (dashboards and Triton's QA look for them): the pool's size
/// (`--pinned-memory-pool-byte-size`) and the bytes backends hold pinned now
/// ([`nereid_shm::pinned`]: Nereid pins on demand within that size rather than
/// reserving it at start-up).
fn write_pinned_pool(out: &mut String) {
    let pool = &nereid_shm::pinned::POOL;
    let gauges = [
        (
            "nv_pinned_memory_pool_total_bytes",
            "Pinned memory pool total memory size, in bytes",
            pool.total(),
        ),
        (
            "nv_pinned_memory_pool_used_bytes",
            "Pinned memory pool used memory size, in bytes",
            pool.used(),
        ),
    ];
    for (name, help, value) in gauges {
        Family::start(out, name, help, Kind::Gauge).sample(&[], &value);
    }
}

/// A summary family's name and help, Triton's.
fn summary_family(kind: SummaryKind) -> (&'static str, &'static str) {
    match kind {
        SummaryKind::Request => (
            "nv_inference_request_summary_us",
            "Summary of inference request duration in microseconds (includes cached requests)",
        ),
        SummaryKind::Queue => (
            "nv_inference_queue_summary_us",
            "Summary of inference queuing duration in microseconds (includes cached requests)",
        ),
        SummaryKind::ComputeInput => (
            "nv_inference_compute_input_summary_us",
            "Cumulative compute input duration in microseconds (does not include cached requests)",
        ),
        SummaryKind::ComputeInfer => (
            "nv_inference_compute_infer_summary_us",
            "Cumulative compute inference duration in microseconds (does not include cached requests)",
        ),
        SummaryKind::ComputeOutput => (
            "nv_inference_compute_output_summary_us",
            "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        ),
        SummaryKind::CacheHit => (
            "nv_cache_hit_summary_per_model",
            "Summary of cache hit counts/durations per model, in microseconds.",
        ),
        SummaryKind::CacheMiss => (
            "nv_cache_miss_summary_per_model",
            "Summary of cache miss counts/durations per model, in microseconds.",
        ),
    }
}

/// Every summary family some model has (`summary_latencies=true`), as prometheus-cpp
/// writes summaries: one sample per quantile, then `_sum` and `_count`.
fn write_summaries(out: &mut String, models: &[ModelMetrics]) {
    const KINDS: [SummaryKind; 7] = [
        SummaryKind::Request,
        SummaryKind::Queue,
        SummaryKind::ComputeInput,
        SummaryKind::ComputeInfer,
        SummaryKind::ComputeOutput,
        SummaryKind::CacheHit,
        SummaryKind::CacheMiss,
    ];
    for kind in KINDS {
        let with: Vec<(&ModelStatsSnapshot, &SummaryReading)> = models
            .iter()
            .filter_map(|m| {
                let (_, reading) = m.latency.summaries.iter().find(|(k, _)| *k == kind)?;
                Some((&m.stats, reading))
            })
            .collect();
        if with.is_empty() {
            continue;
        }
        let (name, help) = summary_family(kind);
        let mut family = Family::start(out, name, help, Kind::Summary);
        for (m, reading) in with {
            let version = m.version.to_string();
            let labels = model_labels(&m.name, &version);
            for (quantile, value) in &reading.quantiles {
                let quantile = quantile.to_string();
                let value = value.unwrap_or(f64::NAN);
                family.sample(&with_label(&labels, "quantile", &quantile), &value);
            }
            family.suffixed("_sum", &labels, &reading.sum);
            family.suffixed("_count", &labels, &reading.count);
        }
    }
}

/// The labels every per-model series carries.
fn model_labels<'a>(model: &'a str, version: &'a str) -> [(&'a str, &'a str); 2] {
    [("model", model), ("version", version)]
}

/// `nv_inference_first_response_histogram_ms` for the models that have it
/// (`histogram_latencies=true`), as prometheus-cpp writes histograms: `_count`, `_sum`,
/// then one cumulative `_bucket` sample per bound, `+Inf` last.
fn write_first_response(out: &mut String, models: &[ModelMetrics]) {
    let with: Vec<(&ModelStatsSnapshot, &HistogramReading)> = models
        .iter()
        .filter_map(|m| Some((&m.stats, m.latency.first_response.as_ref()?)))
        .collect();
    if with.is_empty() {
        return;
    }
    let help = "Duration from request to first response in milliseconds";
    let mut family = Family::start(out, FIRST_RESPONSE_FAMILY, help, Kind::Histogram);
    for (m, reading) in with {
        let version = m.version.to_string();
        family.histogram(&model_labels(&m.name, &version), reading);
    }
}

/// `nv_model_load_duration_secs` (Triton's name and help from 2.52 on; 2.51 has no
/// load-time family).
fn write_load_durations(out: &mut String, models: &[ModelMetrics]) {
    if models.is_empty() {
        return;
    }
    let name = "nv_model_load_duration_secs";
    let mut family = Family::start(out, name, "Model load time in seconds", Kind::Gauge);
    for m in models {
        let version = m.stats.version.to_string();
        let labels = model_labels(&m.stats.name, &version);
        family.sample(&labels, &m.load_duration.as_secs_f64());
    }
}

/// One gauge family read from a per-model value of type `T`.
type Gauge<T> = (&'static str, &'static str, fn(&T) -> u64);

/// The sequence batcher's gauges (Nereid's own; Triton exports none).
const SEQUENCE_GAUGES: [Gauge<Occupancy>; 4] = [
    (
        "nv_sequence_active",
        "Sequences started and not yet ended or released",
        |o| o.active,
    ),
    (
        "nv_sequence_backlog",
        "Sequences waiting for a free sequence slot",
        |o| o.backlog,
    ),
    (
        "nv_sequence_slots_used",
        "Sequence slots held by a sequence",
        |o| o.slots_used,
    ),
    (
        "nv_sequence_slots_total",
        "Sequence slots over all instances",
        |o| o.slots_total,
    ),
];

/// The stateful backend's state memory, summed over instances (Nereid's own).
const STATE_GAUGES: [Gauge<StateUsage>; 4] = [
    (
        "nv_stateful_state_buffers",
        "State buffers allocated (initial plus lazily grown)",
        |u| u.buffers,
    ),
    (
        "nv_stateful_state_bytes",
        "Bytes of sequence state buffers allocated",
        |u| u.bytes,
    ),
    (
        "nv_stateful_sequences",
        "Sequences whose state the backend stores",
        |u| u.sequences,
    ),
    (
        "nv_stateful_sequence_capacity",
        "Sequences the allocated state buffers can hold",
        |u| u.capacity,
    ),
];

/// Writes `families` for the models that have a `T` (skipped entirely when none has).
fn write_gauges<T: Copy>(
    out: &mut String,
    families: &[Gauge<T>],
    models: &[&ModelStatsSnapshot],
    value_of: fn(&ModelStatsSnapshot) -> Option<T>,
) {
    let with: Vec<(&ModelStatsSnapshot, T)> = models
        .iter()
        .filter_map(|&m| value_of(m).map(|v| (m, v)))
        .collect();
    if with.is_empty() {
        return;
    }
    for (name, help, value) in families {
        let mut family = Family::start(out, name, help, Kind::Gauge);
        for (m, v) in &with {
            let version = m.version.to_string();
            family.sample(&model_labels(&m.name, &version), &value(v));
        }
    }
}

/// `families` for each of `models`: the model's series, then one per GPU its instances
/// ran on (labelled with the GPU's UUID, as Triton; a GPU whose UUID the driver does not
/// give stays in the model's series).
fn write_families<'a>(
    out: &mut String,
    families: &[PerModel],
    models: impl Iterator<Item = &'a ModelStatsSnapshot> + Clone,
    uuids: &GpuUuids,
) {
    for per_model in families {
        let mut family = Family::start(out, per_model.name, per_model.help, per_model.kind);
        for s in models.clone() {
            let version = s.version.to_string();
            let labelled = uuids.labelled(s);
            let on_gpus: u64 = match per_model.device {
                Some(device) => labelled.iter().map(|(d, _)| device(d)).sum(),
                None => 0,
            };
            let own = (per_model.value)(s).saturating_sub(on_gpus) / per_model.per;
            family.sample(&model_labels(&s.name, &version), &own);
            let Some(device) = per_model.device else {
                continue;
            };
            for (d, uuid) in &labelled {
                let labels: &Labels<'_> = &[
                    ("gpu_uuid", uuid),
                    ("model", &s.name),
                    ("version", &version),
                ];
                family.sample(labels, &(device(d) / per_model.per));
            }
        }
    }
}

/// The UUID of each GPU the models' instances ran on, read from the CUDA driver once per
/// scrape.
struct GpuUuids(Vec<(u32, String)>);

impl GpuUuids {
    fn of<'a>(models: impl Iterator<Item = &'a ModelStatsSnapshot>) -> Self {
        let mut devices: Vec<u32> = models
            .flat_map(|s| s.devices.iter().map(|d| d.device))
            .collect();
        devices.sort_unstable();
        devices.dedup();
        Self(
            devices
                .into_iter()
                .filter_map(|d| nereid_shm::gpu_uuid(d).map(|uuid| (d, uuid)))
                .collect(),
        )
    }

    /// `s`'s per-GPU shares whose GPU has a UUID, with it.
    fn labelled<'a>(&'a self, s: &'a ModelStatsSnapshot) -> Vec<(&'a DeviceSnapshot, &'a str)> {
        s.devices
            .iter()
            .filter_map(|d| {
                let (_, uuid) = self.0.iter().find(|(id, _)| *id == d.device)?;
                Some((d, uuid.as_str()))
            })
            .collect()
    }
}

/// The local cache's gauges, with Triton's names.
fn write_cache(out: &mut String, c: &CacheSnapshot) {
    let lookups = c.hits + c.misses;
    let gauges: [(&str, &str, &dyn SampleValue); 8] = [
        (
            "nv_cache_num_entries",
            "Number of responses stored in response cache",
            &c.entries,
        ),
        (
            "nv_cache_num_lookups",
            "Number of cache lookups in response cache",
            &lookups,
        ),
        (
            "nv_cache_num_hits",
            "Number of cache hits in response cache",
            &c.hits,
        ),
        (
            "nv_cache_num_misses",
            "Number of cache misses in response cache",
            &c.misses,
        ),
        (
            "nv_cache_num_evictions",
            "Number of cache evictions in response cache",
            &c.evictions,
        ),
        (
            "nv_cache_util",
            "Cache utilization [0.0 - 1.0]",
            &c.utilization,
        ),
        (
            "nv_cache_lookup_duration",
            "Total cache lookup duration (hit and miss), in microseconds",
            &c.lookup_us,
        ),
        (
            "nv_cache_insertion_duration",
            "Total cache insertion duration, in microseconds",
            &c.insertion_us,
        ),
    ];
    for (name, help, value) in gauges {
        Family::start(out, name, help, Kind::Gauge).sample(&[], value);
    }
}

/// `nv_inference_request_failure`, one sample per model and reason, and per GPU its
/// instances ran on (where the backend's failures of those instances count).
fn write_failures(out: &mut String, models: &[&ModelStatsSnapshot], uuids: &GpuUuids) {
    let name = "nv_inference_request_failure";
    let help = "Number of failed inference requests, all batch sizes";
    let mut family = Family::start(out, name, help, Kind::Counter);
    for s in models {
        let version = s.version.to_string();
        let labelled = uuids.labelled(s);
        let on_gpus: u64 = labelled.iter().map(|(d, _)| d.backend_failures).sum();
        for (reason, count) in FailureReason::ALL.iter().zip(s.failures) {
            let labels: &Labels<'_> = &[
                ("model", &s.name),
                ("reason", reason.label()),
                ("version", &version),
            ];
            let own = match reason {
                FailureReason::Backend => count.saturating_sub(on_gpus),
                _ => count,
            };
            family.sample(labels, &own);
        }
        for (d, uuid) in &labelled {
            for reason in FailureReason::ALL {
                let labels: &Labels<'_> = &[
                    ("gpu_uuid", uuid),
                    ("model", &s.name),
                    ("reason", reason.label()),
                    ("version", &version),
                ];
                let count = match reason {
                    FailureReason::Backend => d.backend_failures,
                    _ => 0,
                };
                family.sample(labels, &count);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_triton_names_and_labels() {
        let mut s = ModelStatsSnapshot {
            name: "add_sub".into(),
            version: 1,
            ..Default::default()
        };
        s.inference_stats.success.count = 3;
        s.failures[0] = 2;
        let m = ModelMetrics {
            stats: s,
            latency: LatencyMetrics {
                counters: true,
                summaries: Vec::new(),
                first_response: None,
            },
            load_duration: Duration::from_millis(1500),
        };
        let text = render(std::slice::from_ref(&m), None);
        assert!(text.contains("nv_inference_request_success{model=\"add_sub\",version=\"1\"} 3\n"));
        assert!(text.contains(
            "nv_inference_request_failure{model=\"add_sub\",reason=\"BACKEND\",version=\"1\"} 2\n"
        ));
        assert!(text.contains("# TYPE nv_inference_pending_request_count gauge"));
        assert!(text.contains("# TYPE nv_inference_queue_duration_us counter"));
        assert!(text.contains("nv_model_load_duration_secs{model=\"add_sub\",version=\"1\"} 1.5\n"));
        assert!(!text.contains("summary"));
        // The pinned pool at its default size, nothing pinned: Triton's gauges.
        assert!(text.contains(
            "# TYPE nv_pinned_memory_pool_total_bytes gauge\nnv_pinned_memory_pool_total_bytes 268435456\n"
        ));
        assert!(text.contains("nv_pinned_memory_pool_used_bytes 0\n"));

        // A GPU share whose UUID the driver does not give (none here) stays in the
        // model's series, as Triton's reporter without a UUID does.
        let mut on_gpu = m.clone();
        on_gpu.stats.devices = vec![crate::stats::DeviceSnapshot {
            device: 0,
            inference_count: 2,
            ..Default::default()
        }];
        let text = render(&[on_gpu], None);
        assert!(text.contains("nv_inference_count{model=\"add_sub\",version=\"1\"} "));
        assert!(!text.contains("gpu_uuid"), "{text}");

        let mut quiet = m;
        quiet.latency.counters = false;
        let text = render(&[quiet], None);
        assert!(!text.contains("_duration_us"), "{text}");
        assert!(text.contains("nv_inference_request_success{"));
    }

    #[test]
    fn renders_summaries_as_prometheus_cpp() {
        let reading = SummaryReading {
            quantiles: vec![(0.5, Some(12.0)), (0.99, None)],
            count: 4,
            sum: 50.0,
        };
        let m = ModelMetrics {
            stats: ModelStatsSnapshot {
                name: "m".into(),
                version: 2,
                ..Default::default()
            },
            latency: LatencyMetrics {
                counters: true,
                summaries: vec![(SummaryKind::Queue, reading)],
                first_response: None,
            },
            load_duration: Duration::ZERO,
        };
        let text = render(&[m], None);
        for line in [
            "# TYPE nv_inference_queue_summary_us summary\n",
            "nv_inference_queue_summary_us{model=\"m\",version=\"2\",quantile=\"0.5\"} 12\n",
            "nv_inference_queue_summary_us{model=\"m\",version=\"2\",quantile=\"0.99\"} NaN\n",
            "nv_inference_queue_summary_us_sum{model=\"m\",version=\"2\"} 50\n",
            "nv_inference_queue_summary_us_count{model=\"m\",version=\"2\"} 4\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains("nv_inference_request_summary_us"));
    }

    #[test]
    fn renders_the_first_response_histogram_as_prometheus_cpp() {
        let reading = HistogramReading {
            buckets: vec![(100.0, 2), (0.5, 3), (f64::INFINITY, 4)],
            count: 4,
            sum: 7012.0,
        };
        let m = ModelMetrics {
            stats: ModelStatsSnapshot {
                name: "m".into(),
                version: 1,
                ..Default::default()
            },
            latency: LatencyMetrics {
                counters: true,
                summaries: Vec::new(),
                first_response: Some(reading),
            },
            load_duration: Duration::ZERO,
        };
        let text = render(&[m], None);
        let expected = "# HELP nv_inference_first_response_histogram_ms Duration from request to first response in milliseconds\n\
            # TYPE nv_inference_first_response_histogram_ms histogram\n\
            nv_inference_first_response_histogram_ms_count{model=\"m\",version=\"1\"} 4\n\
            nv_inference_first_response_histogram_ms_sum{model=\"m\",version=\"1\"} 7012\n\
            nv_inference_first_response_histogram_ms_bucket{model=\"m\",version=\"1\",le=\"100\"} 2\n\
            nv_inference_first_response_histogram_ms_bucket{model=\"m\",version=\"1\",le=\"0.5\"} 3\n\
            nv_inference_first_response_histogram_ms_bucket{model=\"m\",version=\"1\",le=\"+Inf\"} 4\n";
        assert!(text.contains(expected), "{text}");
        let off = ModelMetrics::default();
        assert!(!render(&[off], None).contains("histogram"));
    }
}
