//! What the engines of each model version report on the metrics port: sequences
//! generating and slots in all (the KV cache in use), requests waiting, prompt and
//! generated tokens, time to first token and per output token. The token and timing
//! families are named `nereid_llamacpp_*` rather than vLLM's `vllm:*`, which the OpenAI
//! port writes for the generations it runs (any backend): these count every request the
//! engine serves, over KServe and gRPC too, and measure inside the engine (from the
//! request's arrival at the instance), so the two never describe the same family twice.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use nereid_core::metrics::text::{Family, Kind};
use nereid_core::stats::histogram::Histogram;

/// Time-to-first-token bounds in seconds (vLLM's).
const FIRST_TOKEN_BOUNDS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// Time-per-output-token bounds in seconds (vLLM's).
const PER_TOKEN_BOUNDS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

/// The counters of one model version, shared by its instances' engines.
pub struct EngineMetrics {
    model: String,
    version: i64,
    slots: AtomicU64,
    running: AtomicU64,
    waiting: AtomicU64,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    first_token: Histogram,
    per_token: Histogram,
}

/// The model versions loaded now; an entry goes with its model (a weak reference).
static LOADED: Mutex<Vec<Weak<EngineMetrics>>> = Mutex::new(Vec::new());

impl EngineMetrics {
    /// Counters for model `model` version `version`, shown until the model unloads.
    pub fn register(model: &str, version: i64) -> Arc<Self> {
        let histogram =
            |bounds: &[f64]| Histogram::new(bounds.to_vec()).expect("the bounds above increase");
        let metrics = Arc::new(Self {
            model: model.to_string(),
            version,
            slots: AtomicU64::new(0),
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            first_token: histogram(&FIRST_TOKEN_BOUNDS),
            per_token: histogram(&PER_TOKEN_BOUNDS),
        });
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        loaded.retain(|m| m.strong_count() > 0);
        loaded.push(Arc::downgrade(&metrics));
        metrics
    }

    /// An engine of `slots` sequence slots started (negative: stopped).
    pub fn add_slots(&self, slots: i64) {
        add(&self.slots, slots);
    }

    /// An engine's sequences generating and requests waiting changed by these amounts.
    pub fn add_load(&self, running: i64, waiting: i64) {
        add(&self.running, running);
        add(&self.waiting, waiting);
    }

    /// A sequence started with a prompt of `tokens` tokens.
    pub fn prompt(&self, tokens: usize) {
        self.prompt_tokens.fetch_add(tokens as u64, Relaxed);
    }

    /// A token was generated, `gap` after the request arrived (`first`) or after the
    /// sequence's previous token.
    pub fn token(&self, gap: Duration, first: bool) {
        self.generation_tokens.fetch_add(1, Relaxed);
        let histogram = if first {
            &self.first_token
        } else {
            &self.per_token
        };
        histogram.observe(gap.as_secs_f64());
    }
}

fn add(counter: &AtomicU64, delta: i64) {
    if delta >= 0 {
        counter.fetch_add(delta as u64, Relaxed);
    } else {
        counter.fetch_sub(delta.unsigned_abs(), Relaxed);
    }
}

/// A gauge or counter family: name, help, kind and how a model's value is read.
type Sampled = (&'static str, &'static str, Kind, fn(&EngineMetrics) -> u64);
/// A histogram family: name, help and the model's histogram.
type Timed = (&'static str, &'static str, fn(&EngineMetrics) -> &Histogram);

/// Appends the families of every loaded llama.cpp model (nothing when there is none).
pub fn render(out: &mut String) {
    let loaded: Vec<Arc<EngineMetrics>> = LOADED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    if loaded.is_empty() {
        return;
    }
    let versions: Vec<String> = loaded.iter().map(|m| m.version.to_string()).collect();
    let labelled = || {
        loaded.iter().zip(&versions).map(|(m, version)| {
            (
                m,
                [("model", m.model.as_str()), ("version", version.as_str())],
            )
        })
    };
    let values: [Sampled; 5] = [
        (
            "nereid_llamacpp_sequences_running",
            "Sequences generating (KV-cache slots in use)",
            Kind::Gauge,
            |m| m.running.load(Relaxed),
        ),
        (
            "nereid_llamacpp_sequence_slots",
            "KV-cache sequence slots of the loaded instances",
            Kind::Gauge,
            |m| m.slots.load(Relaxed),
        ),
        (
            "nereid_llamacpp_requests_waiting",
            "Requests queued for a free sequence slot",
            Kind::Gauge,
            |m| m.waiting.load(Relaxed),
        ),
        (
            "nereid_llamacpp_prompt_tokens_total",
            "Prompt tokens read",
            Kind::Counter,
            |m| m.prompt_tokens.load(Relaxed),
        ),
        (
            "nereid_llamacpp_generation_tokens_total",
            "Tokens generated",
            Kind::Counter,
            |m| m.generation_tokens.load(Relaxed),
        ),
    ];
    for (name, help, kind, value) in values {
        let mut family = Family::start(out, name, help, kind);
        for (m, labels) in labelled() {
            family.sample(&labels, &value(m));
        }
    }
    let histograms: [Timed; 2] = [
        (
            "nereid_llamacpp_time_to_first_token_seconds",
            "Time from a request's arrival to its first generated token",
            |m| &m.first_token,
        ),
        (
            "nereid_llamacpp_time_per_output_token_seconds",
            "Time between successive tokens of a sequence",
            |m| &m.per_token,
        ),
    ];
    for (name, help, histogram) in histograms {
        let mut family = Family::start(out, name, help, Kind::Histogram);
        for (m, labels) in labelled() {
            family.histogram(&labels, &histogram(m).read());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_model_is_rendered_until_it_goes() {
        let metrics = EngineMetrics::register("metrics \"test\"", 3);
        metrics.add_slots(4);
        metrics.add_load(2, 1);
        metrics.prompt(7);
        metrics.token(Duration::from_millis(30), true);
        metrics.token(Duration::from_millis(5), false);
        let mut out = String::new();
        render(&mut out);
        let labels = r#"model="metrics \"test\"",version="3""#;
        for line in [
            format!("nereid_llamacpp_sequences_running{{{labels}}} 2"),
            format!("nereid_llamacpp_sequence_slots{{{labels}}} 4"),
            format!("nereid_llamacpp_requests_waiting{{{labels}}} 1"),
            format!("nereid_llamacpp_prompt_tokens_total{{{labels}}} 7"),
            format!("nereid_llamacpp_generation_tokens_total{{{labels}}} 2"),
            format!("nereid_llamacpp_time_to_first_token_seconds_bucket{{{labels},le=\"0.04\"}} 1"),
            format!("nereid_llamacpp_time_per_output_token_seconds_count{{{labels}}} 1"),
        ] {
            assert!(out.contains(&line), "{line} in\n{out}");
        }
        drop(metrics);
        let mut out = String::new();
        render(&mut out);
        assert!(!out.contains("metrics \\\"test\\\""), "{out}");
    }
}
