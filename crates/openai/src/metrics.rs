//! The LLM metrics of the OpenAI routes, measured by this frontend for every generation it
//! runs, per model version (labels `model` and `version`): time to first token, time per
//! output token, prompt and generated tokens, and requests finished by reason.
//!
//! The names, help texts, kinds and histogram buckets are those Triton's vLLM backend
//! exports under Triton (`triton-inference-server/vllm_backend` `src/utils/metrics.py`),
//! so dashboards built for Triton + vLLM read them unchanged; `vllm:request_success_total`
//! with its `finished_reason` label is vLLM's own (`vllm/engine/metrics.py`), which that
//! backend does not forward. A model whose backend exports one of these families itself
//! (Triton's vLLM backend run through the python backend registers them as custom
//! metrics) keeps its own: the family is left out here rather than written twice.
//!
//! What is measured (in `generate`): the time to first token runs from the submission of
//! a choice's request to the core to its first response with text, the time per output
//! token between successive responses with text, both only when the model streams; tokens
//! and the finish reason are counted once per choice when it ends (`abort` when dropped
//! before its end), as its `usage` reports them. A model version appears with its first
//! generation and stays until the server stops.
//!
//! Cost: a choice looks its model's entry up once (a read lock; a write lock the first
//! time a model version is seen); after that every token is one `Instant::now` and two
//! relaxed atomic adds into a histogram, and the end of a choice three more. Nothing on
//! the per-token path takes a lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nereid_core::metrics::text::{with_label, Family, Kind, Labels};
use parking_lot::{Mutex, RwLock};

/// vLLM's `vllm:time_to_first_token_seconds` buckets (seconds).
const FIRST_TOKEN_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// vLLM's `vllm:time_per_output_token_seconds` buckets (seconds).
const PER_TOKEN_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

/// The finish reasons every model shows from its first request on (vLLM's
/// `FinishReason`s), so a rate over them never starts from a missing series.
const KNOWN_REASONS: [&str; 3] = ["stop", "length", "abort"];

/// At most this many other finish reasons (the model's own words) get a series of their
/// own per model; any further one is counted as `other`, so a model cannot grow the
/// exposition without bound.
const MAX_OTHER_REASONS: usize = 8;

/// The family names (vLLM's).
const PROMPT_TOKENS: &str = "vllm:prompt_tokens_total";
const GENERATION_TOKENS: &str = "vllm:generation_tokens_total";
const FIRST_TOKEN: &str = "vllm:time_to_first_token_seconds";
const PER_TOKEN: &str = "vllm:time_per_output_token_seconds";
const SUCCESS: &str = "vllm:request_success_total";

/// A model version: name and version number.
type VersionKey = (String, i64);

/// Every model version's LLM metrics; one per OpenAI port, rendered on that port's
/// `/metrics` and on the metrics port.
#[derive(Default)]
pub struct LlmMetrics {
    // Written once per model version (first request), read once per choice; never held
    // across anything but the map operation.
    models: RwLock<BTreeMap<VersionKey, Arc<ModelLlmMetrics>>>,
}

impl LlmMetrics {
    /// The entry of model `name` version `version`, made on first use. Called once per
    /// choice, so the per-token path holds the entry and takes no lock.
    pub fn model(&self, name: &str, version: i64) -> Arc<ModelLlmMetrics> {
        let key = (name.to_string(), version);
        if let Some(entry) = self.models.read().get(&key) {
            return entry.clone();
        }
        self.models.write().entry(key).or_default().clone()
    }

    /// Appends the Prometheus text of every model version seen so far to `out`; a family
    /// `out` already has (a backend's own) is left out.
    pub fn render(&self, out: &mut String) {
        let models: Vec<(VersionKey, Arc<ModelLlmMetrics>)> = self
            .models
            .read()
            .iter()
            .map(|(key, entry)| (key.clone(), entry.clone()))
            .collect();
        if models.is_empty() {
            return;
        }
        let versions: Vec<String> = models.iter().map(|((_, v), _)| v.to_string()).collect();
        let labelled: Vec<([(&str, &str); 2], &ModelLlmMetrics)> = models
            .iter()
            .zip(&versions)
            .map(|(((name, _), m), version)| {
                ([("model", name.as_str()), ("version", version)], &**m)
            })
            .collect();
        let counter = |m: &ModelLlmMetrics, name: &str| match name {
            PROMPT_TOKENS => m.prompt_tokens.load(Ordering::Relaxed),
            _ => m.generation_tokens.load(Ordering::Relaxed),
        };
        for (name, help) in [
            (PROMPT_TOKENS, "Number of prefill tokens processed."),
            (GENERATION_TOKENS, "Number of generation tokens processed."),
        ] {
            if let Some(mut family) = Family::start_unless_present(out, name, help, Kind::Counter) {
                for (labels, m) in &labelled {
                    family.sample(labels, &counter(m, name));
                }
            }
        }
        for (name, help) in [
            (FIRST_TOKEN, "Histogram of time to first token in seconds."),
            (PER_TOKEN, "Histogram of time per output token in seconds."),
        ] {
            if let Some(mut family) = Family::start_unless_present(out, name, help, Kind::Histogram)
            {
                for (labels, m) in &labelled {
                    let histogram = if name == FIRST_TOKEN {
                        &m.first_token
                    } else {
                        &m.per_token
                    };
                    histogram.render(&mut family, labels);
                }
            }
        }
        let help = "Count of successfully processed requests.";
        if let Some(mut family) = Family::start_unless_present(out, SUCCESS, help, Kind::Counter) {
            for (labels, m) in &labelled {
                for (reason, n) in m.finished.counts() {
                    let [model, version] = *labels;
                    family.sample(&[("finished_reason", &reason), model, version], &n);
                }
            }
        }
    }
}

/// One model version's LLM metrics; a choice holds it from start to end.
pub struct ModelLlmMetrics {
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    first_token: Histogram,
    per_token: Histogram,
    finished: Finished,
}

impl Default for ModelLlmMetrics {
    fn default() -> Self {
        Self {
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            first_token: Histogram::new(FIRST_TOKEN_BUCKETS),
            per_token: Histogram::new(PER_TOKEN_BUCKETS),
            finished: Finished::default(),
        }
    }
}

impl ModelLlmMetrics {
    /// The first token of a choice arrived `elapsed` after its request was submitted.
    pub fn first_token(&self, elapsed: Duration) {
        self.first_token.observe(elapsed);
    }

    /// A later token arrived `gap` after the one before it.
    pub fn next_token(&self, gap: Duration) {
        self.per_token.observe(gap);
    }

    /// A choice ended with `reason`, having read `prompt` tokens and generated
    /// `generated`.
    pub fn finished(&self, reason: &str, prompt: u64, generated: u64) {
        self.prompt_tokens.fetch_add(prompt, Ordering::Relaxed);
        self.generation_tokens
            .fetch_add(generated, Ordering::Relaxed);
        self.finished.count(reason);
    }
}

/// A Prometheus histogram of durations kept in atomics: per-bucket (not cumulative)
/// counts, the last one `+Inf`, and the sum in nanoseconds. The count is the buckets'
/// sum, so an observation is two atomic adds and a scrape never sees them disagree.
struct Histogram {
    /// Upper bounds in seconds, ascending; `+Inf` is implied.
    bounds: &'static [f64],
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        // The first bound not below the value: Prometheus' `le` (value <= bound).
        let bucket = self.bounds.partition_point(|bound| *bound < seconds);
        if let Some(count) = self.counts.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Cumulative `_bucket` samples, then `_count` and `_sum`, as Prometheus' clients
    /// write them; `labels` are the series' own, `le` joins them.
    fn render(&self, family: &mut Family<'_>, labels: &Labels<'_>) {
        let mut cumulative = 0;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let le = self
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |b| float(*b));
            family.suffixed("_bucket", &with_label(labels, "le", &le), &cumulative);
        }
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        family.suffixed("_count", labels, &cumulative);
        family.suffixed("_sum", labels, &sum);
    }
}

/// Requests finished, by reason: vLLM's reasons in atomics, the model's own words (rare:
/// a request's end, never a token) in a small map.
#[derive(Default)]
struct Finished {
    known: [AtomicU64; KNOWN_REASONS.len()],
    other: Mutex<BTreeMap<String, u64>>,
}

impl Finished {
    fn count(&self, reason: &str) {
        if let Some(i) = KNOWN_REASONS.iter().position(|known| *known == reason) {
            self.known[i].fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut other = self.other.lock();
        let key = if other.contains_key(reason) || other.len() < MAX_OTHER_REASONS {
            reason
        } else {
            "other"
        };
        *other.entry(key.to_string()).or_default() += 1;
    }

    /// Every reason with its count, vLLM's first.
    fn counts(&self) -> Vec<(String, u64)> {
        let mut counts: Vec<(String, u64)> = KNOWN_REASONS
            .iter()
            .zip(&self.known)
            .map(|(reason, n)| (reason.to_string(), n.load(Ordering::Relaxed)))
            .collect();
        counts.extend(self.other.lock().iter().map(|(r, n)| (r.clone(), *n)));
        counts
    }
}

/// A bucket bound as Python's Prometheus client writes it (`1.0`, `0.025`), so the
/// `le` values are the ones vLLM's dashboards match on.
fn float(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.1}")
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(text: &'a str, line_start: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|l| l.strip_prefix(line_start))
            .map(str::trim)
    }

    #[test]
    fn observations_fall_into_les_buckets() {
        let h = Histogram::new(PER_TOKEN_BUCKETS);
        // On a bound counts in that bound's bucket (`le`); past the last, in +Inf.
        for ms in [10, 11, 3000] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = String::new();
        h.render(
            &mut Family::start(&mut out, "t", "t", Kind::Histogram),
            &[("model", "m")],
        );
        assert_eq!(sample(&out, "t_bucket{model=\"m\",le=\"0.01\"}"), Some("1"));
        assert_eq!(
            sample(&out, "t_bucket{model=\"m\",le=\"0.025\"}"),
            Some("2")
        );
        assert_eq!(sample(&out, "t_bucket{model=\"m\",le=\"2.5\"}"), Some("2"));
        assert_eq!(sample(&out, "t_bucket{model=\"m\",le=\"+Inf\"}"), Some("3"));
        assert_eq!(sample(&out, "t_count{model=\"m\"}"), Some("3"));
        assert_eq!(sample(&out, "t_sum{model=\"m\"}"), Some("3.021"));
    }

    #[test]
    fn a_model_renders_every_family_with_escaped_labels() {
        let metrics = LlmMetrics::default();
        let m = metrics.model("a\"b\\c\nd", 2);
        m.first_token(Duration::from_millis(3));
        m.next_token(Duration::from_millis(20));
        m.finished("stop", 3, 12);
        m.finished("my\"reason", 1, 1);
        // The same entry on the next lookup.
        assert!(Arc::ptr_eq(&m, &metrics.model("a\"b\\c\nd", 2)));
        let mut out = String::new();
        metrics.render(&mut out);
        let labels = r#"model="a\"b\\c\nd",version="2""#;
        let at = |name: &str| sample(&out, &format!("{name}{{{labels}}}"));
        assert_eq!(at(PROMPT_TOKENS), Some("4"));
        assert_eq!(at(GENERATION_TOKENS), Some("13"));
        assert_eq!(at("vllm:time_to_first_token_seconds_count"), Some("1"));
        assert_eq!(at("vllm:time_per_output_token_seconds_count"), Some("1"));
        let reason = |r: &str| {
            sample(
                &out,
                &format!("{SUCCESS}{{finished_reason=\"{r}\",{labels}}}"),
            )
        };
        assert_eq!(reason("stop"), Some("1"));
        assert_eq!(reason("length"), Some("0"));
        assert_eq!(reason("abort"), Some("0"));
        assert_eq!(reason(r#"my\"reason"#), Some("1"));
        assert!(out.contains("# TYPE vllm:time_to_first_token_seconds histogram\n"));
        assert!(out.contains("le=\"1.0\"} 1\n"));
    }

    #[test]
    fn a_family_already_exported_is_left_out() {
        let metrics = LlmMetrics::default();
        metrics.model("m", 1).finished("stop", 1, 1);
        let mut out =
            "# HELP vllm:prompt_tokens_total x\n# TYPE vllm:prompt_tokens_total counter\n\
                       vllm:prompt_tokens_total{model=\"m\",version=\"1\"} 7\n"
                .to_string();
        metrics.render(&mut out);
        assert_eq!(out.matches("# TYPE vllm:prompt_tokens_total ").count(), 1);
        assert_eq!(
            out.matches("# TYPE vllm:generation_tokens_total ").count(),
            1
        );
    }

    #[test]
    fn nothing_is_rendered_before_a_model_is_used() {
        let mut out = String::new();
        LlmMetrics::default().render(&mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn other_reasons_are_capped() {
        let finished = Finished::default();
        for i in 0..MAX_OTHER_REASONS + 3 {
            finished.count(&format!("r{i}"));
        }
        let counts = finished.counts();
        assert_eq!(counts.len(), KNOWN_REASONS.len() + MAX_OTHER_REASONS + 1);
        assert!(counts.contains(&("other".to_string(), 3)));
    }
}
