//! From a request's shared fields to its running choices: `n` choices for each prompt,
//! each one ordinary inference request (a seeded request gets seed, seed+1, ... so the
//! choices differ and stay reproducible), started together so they run side by side.

use futures::future::join_all;
use serde_json::{Map, Value};

use crate::catalog::{Convention, Served};
use crate::error::ApiResult;
use crate::generate::{ChoiceRun, Finish};
use crate::schema::{Sampling, Unknown};
use crate::tensors::Generation;
use crate::AppState;

/// What every choice of a request shares.
pub(crate) struct Plan<'a> {
    pub(crate) served: &'a Served,
    pub(crate) convention: Convention,
    pub(crate) sampling: &'a Sampling,
    /// Fields this frontend does not know: passed on to a vLLM model's sampling
    /// parameters.
    pub(crate) unknown: &'a Unknown,
    pub(crate) max_tokens: u32,
    pub(crate) json_schema: Option<Value>,
}

/// vLLM's sampling fields of a request (its own names), with the request's unknown
/// fields for a vLLM model.
fn sampling_fields(plan: &Plan<'_>) -> Map<String, Value> {
    let s = plan.sampling;
    let mut fields = Map::new();
    let mut set = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            fields.insert(name.to_string(), value);
        }
    };
    set("temperature", s.temperature.map(Value::from));
    set("top_p", s.top_p.map(Value::from));
    set("top_k", s.top_k.map(Value::from));
    set("min_p", s.min_p.map(Value::from));
    set("seed", s.seed.map(Value::from));
    set("presence_penalty", s.presence_penalty.map(Value::from));
    set("frequency_penalty", s.frequency_penalty.map(Value::from));
    let stops = s.stop.as_ref().map(|s| s.strings()).unwrap_or_default();
    if !stops.is_empty() {
        set("stop", Some(Value::from(stops)));
    }
    if plan.convention == Convention::Vllm {
        for (name, value) in plan.unknown {
            fields.entry(name.clone()).or_insert_with(|| value.clone());
        }
    }
    fields
}

/// Starts `n` choices for each of `prompts`, in OpenAI's order (prompt by prompt).
pub(crate) fn start(
    state: &AppState,
    plan: &Plan<'_>,
    prompts: &[String],
) -> ApiResult<Vec<ChoiceRun>> {
    let fields = sampling_fields(plan);
    let stops = plan
        .sampling
        .stop
        .as_ref()
        .map(|s| s.strings())
        .unwrap_or_default();
    let n = plan.sampling.choices();
    let mut runs = Vec::with_capacity(prompts.len() * n as usize);
    for prompt in prompts {
        for j in 0..n {
            let mut sampling = fields.clone();
            if let (Some(seed), true) = (plan.sampling.seed, j > 0) {
                sampling.insert("seed".into(), Value::from(seed.wrapping_add(u64::from(j))));
            }
            let generation = Generation {
                prompt: prompt.clone(),
                stream: plan.sampling.stream,
                max_tokens: plan.max_tokens,
                sampling,
                logprobs: None,
                json_schema: plan.json_schema.clone(),
            };
            runs.push(ChoiceRun::start(
                state,
                &plan.served.spec,
                plan.convention,
                &generation,
                stops.clone(),
                plan.served.text.clone(),
            )?);
        }
    }
    Ok(runs)
}

/// Runs every choice to its end, side by side.
pub(crate) async fn collect(runs: Vec<ChoiceRun>) -> ApiResult<Vec<(String, Finish)>> {
    join_all(runs.into_iter().map(ChoiceRun::collect))
        .await
        .into_iter()
        .collect()
}
