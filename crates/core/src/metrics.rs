//! Prometheus text exposition with Triton's metric names and labels, rendered at scrape
//! time from the per-model statistics (so the hot path updates one set of counters).

use std::fmt::Write;

use crate::backend::StateUsage;
use crate::cache::stats::CacheSnapshot;
use crate::stats::{FailureReason, ModelStatsSnapshot, Occupancy};

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    value: fn(&ModelStatsSnapshot) -> u64,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "nv_inference_request_success",
        help: "Number of successful inference requests, all batch sizes",
        kind: "counter",
        value: |s| s.inference_stats.success.count,
    },
    Family {
        name: "nv_inference_count",
        help: "Number of inferences performed (does not include cached requests)",
        kind: "counter",
        value: |s| s.inference_count,
    },
    Family {
        name: "nv_inference_exec_count",
        help: "Number of model executions performed (does not include cached requests)",
        kind: "counter",
        value: |s| s.execution_count,
    },
    Family {
        name: "nv_inference_pending_request_count",
        help: "Instantaneous number of pending requests awaiting execution per-model.",
        kind: "gauge",
        value: |s| s.pending,
    },
    Family {
        name: "nv_inference_request_duration_us",
        help: "Cumulative inference request duration in microseconds (includes cached requests)",
        kind: "counter",
        value: |s| s.inference_stats.success.ns / 1000,
    },
    Family {
        name: "nv_inference_queue_duration_us",
        help: "Cumulative inference queuing duration in microseconds (includes cached requests)",
        kind: "counter",
        value: |s| s.inference_stats.queue.ns / 1000,
    },
    Family {
        name: "nv_inference_compute_input_duration_us",
        help: "Cumulative compute input duration in microseconds (does not include cached requests)",
        kind: "counter",
        value: |s| s.inference_stats.compute_input.ns / 1000,
    },
    Family {
        name: "nv_inference_compute_infer_duration_us",
        help: "Cumulative compute inference duration in microseconds (does not include cached requests)",
        kind: "counter",
        value: |s| s.inference_stats.compute_infer.ns / 1000,
    },
    Family {
        name: "nv_inference_compute_output_duration_us",
        help: "Cumulative inference compute output duration in microseconds (does not include cached requests)",
        kind: "counter",
        value: |s| s.inference_stats.compute_output.ns / 1000,
    },
];

/// Per-model cache families, exported only for models that use the cache (as Triton).
const CACHE_FAMILIES: &[Family] = &[
    Family {
        name: "nv_cache_num_hits_per_model",
        help: "Number of cache hits per model",
        kind: "counter",
        value: |s| s.inference_stats.cache_hit.count,
    },
    Family {
        name: "nv_cache_num_misses_per_model",
        help: "Number of cache misses per model",
        kind: "counter",
        value: |s| s.inference_stats.cache_miss.count,
    },
    Family {
        name: "nv_cache_hit_duration_per_model",
        help: "Total cache hit duration per model, in microseconds",
        kind: "counter",
        value: |s| s.inference_stats.cache_hit.ns / 1000,
    },
    Family {
        name: "nv_cache_miss_duration_per_model",
        help: "Total cache miss (insert+lookup) duration per model, in microseconds",
        kind: "counter",
        value: |s| s.inference_stats.cache_miss.ns / 1000,
    },
];

/// Renders the metrics of `models` (and of the local response cache, when there is one)
/// in the Prometheus text format.
pub fn render(models: &[ModelStatsSnapshot], cache: Option<&CacheSnapshot>) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_failures(&mut out, models);
    write_families(&mut out, FAMILIES, models.iter());
    let cached: Vec<&ModelStatsSnapshot> = models.iter().filter(|m| m.cache_enabled).collect();
    if !cached.is_empty() {
        write_families(&mut out, CACHE_FAMILIES, cached.into_iter());
    }
    if let Some(cache) = cache {
        let _ = write_cache(&mut out, cache);
    }
    let _ = write_gauges(&mut out, &SEQUENCE_GAUGES, models, |m| m.sequences);
    let _ = write_gauges(&mut out, &STATE_GAUGES, models, |m| m.state_usage);
    out
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
    models: &[ModelStatsSnapshot],
    value_of: fn(&ModelStatsSnapshot) -> Option<T>,
) -> std::fmt::Result {
    let with: Vec<(&ModelStatsSnapshot, T)> = models
        .iter()
        .filter_map(|m| value_of(m).map(|v| (m, v)))
        .collect();
    if with.is_empty() {
        return Ok(());
    }
    for (name, help, value) in families {
        write_header(out, name, help, "gauge")?;
        for (m, v) in &with {
            writeln!(
                out,
                "{name}{{model=\"{}\",version=\"{}\"}} {}",
                escape(&m.name),
                m.version,
                value(v)
            )?;
        }
    }
    Ok(())
}

/// A family's `# HELP` and `# TYPE` lines.
fn write_header(out: &mut String, name: &str, help: &str, kind: &str) -> std::fmt::Result {
    writeln!(out, "# HELP {name} {help}")?;
    writeln!(out, "# TYPE {name} {kind}")
}

fn write_families<'a>(
    out: &mut String,
    families: &[Family],
    models: impl Iterator<Item = &'a ModelStatsSnapshot> + Clone,
) {
    for family in families {
        let _ = write_header(out, family.name, family.help, family.kind);
        for s in models.clone() {
            let _ = writeln!(
                out,
                "{}{{model=\"{}\",version=\"{}\"}} {}",
                family.name,
                escape(&s.name),
                s.version,
                (family.value)(s)
            );
        }
    }
}

/// The local cache's gauges, with Triton's names.
fn write_cache(out: &mut String, c: &CacheSnapshot) -> std::fmt::Result {
    let gauges: [(&str, &str, String); 8] = [
        (
            "nv_cache_num_entries",
            "Number of responses stored in response cache",
            c.entries.to_string(),
        ),
        (
            "nv_cache_num_lookups",
            "Number of cache lookups in response cache",
            (c.hits + c.misses).to_string(),
        ),
        (
            "nv_cache_num_hits",
            "Number of cache hits in response cache",
            c.hits.to_string(),
        ),
        (
            "nv_cache_num_misses",
            "Number of cache misses in response cache",
            c.misses.to_string(),
        ),
        (
            "nv_cache_num_evictions",
            "Number of cache evictions in response cache",
            c.evictions.to_string(),
        ),
        (
            "nv_cache_util",
            "Cache utilization [0.0 - 1.0]",
            c.utilization.to_string(),
        ),
        (
            "nv_cache_lookup_duration",
            "Total cache lookup duration (hit and miss), in microseconds",
            c.lookup_us.to_string(),
        ),
        (
            "nv_cache_insertion_duration",
            "Total cache insertion duration, in microseconds",
            c.insertion_us.to_string(),
        ),
    ];
    for (name, help, value) in gauges {
        write_header(out, name, help, "gauge")?;
        writeln!(out, "{name} {value}")?;
    }
    Ok(())
}

fn write_failures(out: &mut String, models: &[ModelStatsSnapshot]) -> std::fmt::Result {
    writeln!(
        out,
        "# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes"
    )?;
    writeln!(out, "# TYPE nv_inference_request_failure counter")?;
    for s in models {
        for (reason, count) in FailureReason::ALL.iter().zip(s.failures) {
            writeln!(
                out,
                "nv_inference_request_failure{{model=\"{}\",reason=\"{}\",version=\"{}\"}} {count}",
                escape(&s.name),
                reason.label(),
                s.version
            )?;
        }
    }
    Ok(())
}

/// Escapes a label value (backslash, quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
        let text = render(&[s], None);
        assert!(text.contains("nv_inference_request_success{model=\"add_sub\",version=\"1\"} 3\n"));
        assert!(text.contains(
            "nv_inference_request_failure{model=\"add_sub\",reason=\"BACKEND\",version=\"1\"} 2\n"
        ));
        assert!(text.contains("# TYPE nv_inference_pending_request_count gauge"));
    }
}
