//! `--metrics-config <setting>=<value>` (and `TRITONSERVER_ServerOptionsSetMetricsConfig`):
//! which per-model latency families are exported, with tritonserver's settings and
//! defaults (2.51's, plus 2.52's `histogram_latencies`). Where tritonserver logs a bad
//! value and goes on, a bad value here is refused, naming the setting and the value.

use crate::stats::summary::Quantile;

/// The per-model latency metrics to export (Triton's `MetricReporterConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsConfig {
    /// `counter_latencies` (default true): the `nv_inference_*_duration_us` counters and
    /// the per-model cache duration counters.
    pub counter_latencies: bool,
    /// `summary_latencies` (default false): the `nv_inference_*_summary_us` summaries and
    /// the per-model cache summaries.
    pub summary_latencies: bool,
    /// `summary_quantiles` (default `0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,0.999:0.001`):
    /// the summaries' quantiles and their rank errors.
    pub summary_quantiles: Vec<Quantile>,
    /// `histogram_latencies` (default false; Triton 2.52+):
    /// `nv_inference_first_response_histogram_ms`.
    pub histogram_latencies: bool,
}

/// Triton's default summary quantiles.
const DEFAULT_QUANTILES: [(f64, f64); 5] = [
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
];

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            counter_latencies: true,
            summary_latencies: false,
            summary_quantiles: DEFAULT_QUANTILES
                .iter()
                .map(|&(quantile, error)| Quantile { quantile, error })
                .collect(),
            histogram_latencies: false,
        }
    }
}

impl MetricsConfig {
    /// The configuration the `--metrics-config` flags give, in order (a later setting
    /// replaces an earlier one). The error is the message to stop start-up with.
    pub fn from_flags(flags: &[String]) -> Result<Self, String> {
        let mut config = Self::default();
        for flag in flags {
            config.apply(flag)?;
        }
        Ok(config)
    }

    fn apply(&mut self, flag: &str) -> Result<(), String> {
        // tritonserver's own message for the format; it has no per-family settings yet,
        // so `<family>,<setting>=<value>` is refused as it refuses it.
        let format = || format!("--metrics-config option format is <setting>=<value>. Got {flag}");
        let (setting, value) = flag.split_once('=').ok_or_else(format)?;
        if setting.contains(',') || setting.is_empty() || value.is_empty() {
            return Err(format());
        }
        self.set(setting, value)
            .map_err(|why| format!("--metrics-config {flag}: {why}"))
    }

    /// Applies one setting (replacing its earlier value). The error says what is wrong
    /// with the value or names the settings there are; the caller adds where it came from.
    pub fn set(&mut self, setting: &str, value: &str) -> Result<(), String> {
        let flag = |value: &str| boolean(value).ok_or_else(|| "expected true or false".to_string());
        match setting {
            "counter_latencies" => self.counter_latencies = flag(value)?,
            "summary_latencies" => self.summary_latencies = flag(value)?,
            "histogram_latencies" => self.histogram_latencies = flag(value)?,
            "summary_quantiles" => self.summary_quantiles = quantiles(value)?,
            _ => {
                return Err(format!(
                    "unknown setting '{setting}' (there are counter_latencies, summary_latencies, summary_quantiles and histogram_latencies)"
                ))
            }
        }
        Ok(())
    }
}

fn boolean(value: &str) -> Option<bool> {
    match value {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// `<quantile>:<error>[,<quantile>:<error>...]`, each quantile in [0, 1] and each error
/// in (0, 1]; at least one pair.
fn quantiles(value: &str) -> Result<Vec<Quantile>, String> {
    value
        .split(',')
        .map(|pair| {
            let parsed = pair.split_once(':').and_then(|(q, e)| {
                Some(Quantile {
                    quantile: q.trim().parse().ok()?,
                    error: e.trim().parse().ok()?,
                })
            });
            match parsed {
                Some(q) if (0.0..=1.0).contains(&q.quantile) && q.error > 0.0 && q.error <= 1.0 => {
                    Ok(q)
                }
                Some(_) => Err(format!(
                    "'{pair}': the quantile must be in [0, 1] and the error in (0, 1]"
                )),
                None => Err(format!("'{pair}' is not <quantile>:<error>")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &[&str]) -> Result<MetricsConfig, String> {
        MetricsConfig::from_flags(&flags.iter().map(|f| f.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn defaults_are_tritons() {
        let config = parse(&[]).expect("no flags");
        assert!(config.counter_latencies && !config.summary_latencies);
        assert!(!config.histogram_latencies);
        assert_eq!(config.summary_quantiles.len(), 5);
        assert_eq!(config.summary_quantiles[1].quantile, 0.9);
        assert_eq!(config.summary_quantiles[1].error, 0.01);
    }

    #[test]
    fn settings_apply_in_order() {
        let config = parse(&[
            "summary_latencies=true",
            "counter_latencies=false",
            "summary_quantiles=0.5:0.05, 0.99:0.001",
            "counter_latencies=true",
            "histogram_latencies=true",
        ])
        .expect("valid flags");
        assert!(config.counter_latencies && config.summary_latencies);
        assert!(config.histogram_latencies);
        assert_eq!(
            config.summary_quantiles,
            vec![
                Quantile {
                    quantile: 0.5,
                    error: 0.05
                },
                Quantile {
                    quantile: 0.99,
                    error: 0.001
                }
            ]
        );
    }

    #[test]
    fn bad_flags_name_the_flag_and_value() {
        for (flag, expected) in [
            (
                "summary_quantiles=abc",
                "--metrics-config summary_quantiles=abc: 'abc' is not <quantile>:<error>",
            ),
            (
                "summary_quantiles=0.5:x",
                "'0.5:x' is not <quantile>:<error>",
            ),
            (
                "summary_quantiles=1.5:0.1",
                "'1.5:0.1': the quantile must be in [0, 1]",
            ),
            ("summary_quantiles=0.5:0", "the error in (0, 1]"),
            ("summary_quantiles=0.5:0.1,", "'' is not <quantile>:<error>"),
            (
                "summary_latencies=yes",
                "--metrics-config summary_latencies=yes: expected true or false",
            ),
            (
                "histogram_latencies=1",
                "--metrics-config histogram_latencies=1: expected true or false",
            ),
            ("histogram_buckets=1", "unknown setting 'histogram_buckets'"),
            (
                "summary_latencies",
                "--metrics-config option format is <setting>=<value>. Got summary_latencies",
            ),
            (
                "model,summary_latencies=true",
                "Got model,summary_latencies=true",
            ),
            ("=true", "format is"),
            ("summary_latencies=", "format is"),
        ] {
            let error = parse(&[flag]).expect_err(flag);
            assert!(error.contains(expected), "{flag}: {error}");
        }
    }
}
