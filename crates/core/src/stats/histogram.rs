//! Prometheus histograms as prometheus-cpp (and so Triton) keeps them: fixed upper bounds
//! (`le`), a count per bound, a cumulative count and sum; and Triton's one per-model
//! histogram, `nv_inference_first_response_histogram_ms` (`histogram_latencies`), whose
//! bounds a model may override in its configuration's `model_metrics`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use super::ModelStats;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use nereid_proto::inference::model_metrics::metric_control::MetricOptions;

/// The first-response histogram's family name, as `model_metrics` names it.
pub const FIRST_RESPONSE_FAMILY: &str = "nv_inference_first_response_histogram_ms";

/// Triton's default first-response bounds, in milliseconds (core
/// `src/metric_model_reporter.h`, `histogram_options_`).
pub const DEFAULT_FIRST_RESPONSE_BUCKETS: [f64; 4] = [100.0, 500.0, 2000.0, 5000.0];

/// A histogram with fixed upper bounds; observed lock-free.
#[derive(Debug)]
pub struct Histogram {
    bounds: Vec<f64>,
    /// One count per bound, then the `+Inf` bucket (not cumulative).
    counts: Vec<AtomicU64>,
    /// The sum of the observed values, as `f64` bits.
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds, which must increase strictly (prometheus-cpp
    /// refuses other bounds too). No bounds: only the `+Inf` bucket.
    pub fn new(bounds: Vec<f64>) -> std::result::Result<Self, String> {
        if bounds.iter().any(|b| b.is_nan()) || bounds.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "histogram buckets must be numbers in strictly increasing order, got {bounds:?}"
            ));
        }
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Ok(Self {
            bounds,
            counts,
            sum: AtomicU64::new(0f64.to_bits()),
        })
    }

    /// Counts `value` in the first bucket whose bound is at least `value`.
    pub fn observe(&self, value: f64) {
        let index = self.bounds.partition_point(|&b| b < value);
        self.counts[index].fetch_add(1, Relaxed);
        // A CAS loop: there is no atomic f64 add.
        let _ = self.sum.fetch_update(Relaxed, Relaxed, |bits| {
            Some((f64::from_bits(bits) + value).to_bits())
        });
    }

    /// The cumulative count under each bound (`+Inf` last), the count and the sum.
    pub fn read(&self) -> HistogramReading {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.counts.len());
        for (i, count) in self.counts.iter().enumerate() {
            total += count.load(Relaxed);
            buckets.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), total));
        }
        HistogramReading {
            buckets,
            count: total,
            sum: f64::from_bits(self.sum.load(Relaxed)),
        }
    }
}

/// A read-out of a [`Histogram`].
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramReading {
    /// `(le, cumulative count)`, the last bound `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Sum of the observed values.
    pub sum: f64,
}

/// The first-response bounds of a model: Triton's defaults unless its `model_metrics`
/// has a `metric_control` for the family (the configuration check refuses one without
/// `histogram_options` or buckets, as Triton's `ValidateModelMetrics`). Controls for other families are ignored with Triton's
/// warning. Bounds that do not increase fail the load.
pub fn first_response_histogram(config: &ModelConfig) -> Result<Histogram> {
    let mut bounds = DEFAULT_FIRST_RESPONSE_BUCKETS.to_vec();
    let controls = config.model_metrics.iter().flat_map(|m| &m.metric_control);
    for control in controls {
        let family = control
            .metric_identifier
            .as_ref()
            .map_or("", |id| id.family.as_str());
        if family != FIRST_RESPONSE_FAMILY {
            tracing::warn!(
                model = %config.name,
                "Metric family '{family}' in 'metric_identifier' is not a customizable metric in Triton core."
            );
            continue;
        }
        bounds = match &control.metric_options {
            Some(MetricOptions::HistogramOptions(h)) => h.buckets.clone(),
            None => Vec::new(),
        };
    }
    Histogram::new(bounds).map_err(|why| {
        Error::invalid_arg(format!(
            "model '{}': model_metrics for '{FIRST_RESPONSE_FAMILY}': {why}",
            config.name
        ))
    })
}

/// Observes one request's first response in its model's first-response histogram, once:
/// Triton counts the first response sent for a request (a decoupled model's first of
/// many, or a model's only one; an error response too, a final flag alone not), in
/// whole milliseconds since the request entered the server.
#[derive(Debug)]
pub struct FirstResponse {
    stats: Arc<ModelStats>,
    received_at: Instant,
    seen: AtomicBool,
}

impl FirstResponse {
    /// The observer for a request received at `received_at`, or `None` when the model
    /// has no first-response histogram (`histogram_latencies` off), so nothing is kept.
    pub fn of(stats: &Arc<ModelStats>, received_at: Instant) -> Option<Self> {
        stats.first_response.as_ref()?;
        Some(Self {
            stats: stats.clone(),
            received_at,
            seen: AtomicBool::new(false),
        })
    }

    /// A response of the request is being sent: observed if it is the first.
    pub fn responded(&self) {
        if self.seen.swap(true, Relaxed) {
            return;
        }
        if let Some(histogram) = &self.stats.first_response {
            // Whole milliseconds, as Triton's integer division of nanoseconds.
            histogram.observe(self.received_at.elapsed().as_millis() as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_proto::inference::model_metrics::metric_control::{
        HistogramOptions, MetricIdentifier,
    };
    use nereid_proto::inference::model_metrics::MetricControl;
    use nereid_proto::inference::ModelMetrics;

    #[test]
    fn buckets_are_cumulative_with_inclusive_bounds() {
        let h = Histogram::new(vec![1.0, 2.0, 4.0]).expect("increasing");
        for v in [0.0, 1.0, 1.5, 2.0, 3.0, 9.0] {
            h.observe(v);
        }
        let r = h.read();
        assert_eq!(
            r.buckets,
            vec![(1.0, 2), (2.0, 4), (4.0, 5), (f64::INFINITY, 6)]
        );
        assert_eq!((r.count, r.sum), (6, 16.5));
        let only_inf = Histogram::new(Vec::new()).expect("no bounds");
        only_inf.observe(3.0);
        assert_eq!(only_inf.read().buckets, vec![(f64::INFINITY, 1)]);
    }

    #[test]
    fn refuses_bounds_that_do_not_increase() {
        for bounds in [vec![2.0, 1.0], vec![1.0, 1.0], vec![f64::NAN]] {
            assert!(Histogram::new(bounds).is_err());
        }
    }

    fn config(controls: Vec<(&str, Option<Vec<f64>>)>) -> ModelConfig {
        ModelConfig {
            name: "m".into(),
            model_metrics: Some(ModelMetrics {
                metric_control: controls
                    .into_iter()
                    .map(|(family, buckets)| MetricControl {
                        metric_identifier: Some(MetricIdentifier {
                            family: family.into(),
                        }),
                        metric_options: buckets.map(|buckets| {
                            MetricOptions::HistogramOptions(HistogramOptions { buckets })
                        }),
                    })
                    .collect(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn model_metrics_override_the_default_bounds() {
        let bounds = |c: &ModelConfig| {
            let h = first_response_histogram(c).expect("valid");
            let r = h.read();
            r.buckets.iter().map(|(le, _)| *le).collect::<Vec<_>>()
        };
        let inf = f64::INFINITY;
        assert_eq!(
            bounds(&ModelConfig::default()),
            vec![100.0, 500.0, 2000.0, 5000.0, inf]
        );
        let custom = config(vec![
            ("nv_other", Some(vec![3.0])),
            (FIRST_RESPONSE_FAMILY, Some(vec![1.0, 2.0, 4.0, 8.0])),
        ]);
        assert_eq!(bounds(&custom), vec![1.0, 2.0, 4.0, 8.0, inf]);
        assert_eq!(
            bounds(&config(vec![(FIRST_RESPONSE_FAMILY, None)])),
            vec![inf]
        );
        let bad = config(vec![(FIRST_RESPONSE_FAMILY, Some(vec![5.0, 1.0]))]);
        let error = first_response_histogram(&bad).expect_err("decreasing");
        assert!(error.to_string().contains("strictly increasing"), "{error}");
    }

    #[test]
    fn only_the_first_response_is_observed() {
        let histogram = Histogram::new(vec![1000.0]).expect("one bound");
        let stats = Arc::new(ModelStats::default().with_first_response(histogram));
        let first = FirstResponse::of(&stats, Instant::now()).expect("histogram on");
        first.responded();
        first.responded();
        let reading = stats
            .latency_metrics()
            .first_response
            .expect("histogram on");
        assert_eq!(reading.count, 1);
        assert_eq!(reading.buckets[0], (1000.0, 1));
        assert!(FirstResponse::of(&Arc::new(ModelStats::default()), Instant::now()).is_none());
    }
}
