//! Ensembles (`platform: "ensemble"`): a data-flow graph of steps, each an inference on
//! another loaded model, run by the server itself.
//!
//! - [`graph`]: the graph from the configuration alone, validated, as a [`graph::Plan`].
//! - [`check`]: validation against the composing models once they are loaded.
//! - [`lineage`]: which decoupled step each tensor descends from (streaming ensembles).
//! - [`run`]: one request's execution, step by step as inputs arrive.
//! - [`order`]: a sequence's requests kept in order at every step.
//!
//! An ensemble looks its composing models up on every request (through [`StepModels`],
//! the repository's table), so a reloaded composing model serves the next request. The
//! ensemble's own response cache, statistics and request validation are those of any
//! loaded model ([`crate::loaded::LoadedModel`]); only what happens after validation and
//! the cache lookup differs.

mod batch_dims;
pub mod check;
pub mod graph;
pub mod lineage;
mod order;
pub mod run;

use std::sync::{Arc, Weak};

use nereid_proto::inference::ModelConfig;

use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::{Answer, InferRequest};
use crate::response_stream::ResponseStream;
use crate::stats::StepTimes;
use graph::Plan;
use order::SequenceOrder;
use run::Run;

/// Where an ensemble finds its composing models: the ready version `version` of `name`
/// (the latest ready one for `None`).
pub trait StepModels: Send + Sync {
    /// The loaded model a step runs on.
    fn step_model(&self, name: &str, version: Option<i64>) -> Result<Arc<dyn StepModel>>;
}

/// A composing model as an ensemble needs it: its spec to check steps against, and a way
/// to submit a step. A loaded model ([`crate::loaded::LoadedModel`]) is one; the trait
/// keeps this module below it, so the two do not import each other.
pub trait StepModel: Send + Sync {
    /// The model's spec.
    fn spec(&self) -> &ModelSpec;

    /// The plan of a nested ensemble (`None` for other models).
    fn ensemble_plan(&self) -> Option<&Plan>;

    /// Submits one step request through the model's own path (validation, cache,
    /// scheduler, statistics); on success its queue and compute times are also added to
    /// `times`, the ensemble's sums.
    fn submit_step(
        self: Arc<Self>,
        request: InferRequest,
        received_at: std::time::Instant,
        times: Arc<StepTimes>,
    ) -> Answer;

    /// Submits one step request to a decoupled model: its responses, as they come.
    fn submit_step_stream(
        self: Arc<Self>,
        request: InferRequest,
        received_at: std::time::Instant,
    ) -> Result<ResponseStream>;
}

/// A loaded ensemble: its validated plan and the table its steps are looked up in.
#[derive(Clone)]
pub struct Ensemble {
    name: Arc<str>,
    plan: Arc<Plan>,
    /// Weak, because the table holds this ensemble: a strong reference would be a cycle.
    models: Weak<dyn StepModels>,
    /// Whether a step is decoupled, which makes the ensemble decoupled too.
    decoupled: bool,
    /// `ensemble_scheduling.max_inflight_requests`: requests of one step running at once
    /// for one ensemble request (0: no bound). It matters when a decoupled step's
    /// responses each start downstream steps.
    max_inflight: usize,
    /// Whether the ensemble batches (`max_batch_size > 0`), and its outputs' shapes as
    /// the steps produce them (`reshape.shape`, else `dims`) in the plan's output order:
    /// where a tensor crosses between batching and non-batching models ([`batch_dims`]).
    batching: bool,
    output_dims: Arc<[Vec<i64>]>,
    /// Where each sequence's requests stand at each step (see [`order`]); `None` for a
    /// decoupled ensemble.
    order: Option<Arc<SequenceOrder>>,
}

impl Ensemble {
    /// An ensemble over the composing models `models` holds now, checked against them.
    pub fn new(config: &ModelConfig, plan: Plan, models: Weak<dyn StepModels>) -> Result<Self> {
        let table = models
            .upgrade()
            .ok_or_else(|| Error::unavailable("the model repository is shutting down"))?;
        check::check_steps(config, &plan, table.as_ref())?;
        let decoupled = lineage::has_decoupled_step(&config.name, &plan, table.as_ref())?;
        let output_dims = plan
            .outputs
            .iter()
            .map(|&id| {
                let name = &plan.tensors[id];
                // The shape the steps produce: `reshape`'s where there is one, as Triton.
                let output = config.output.iter().find(|o| &o.name == name);
                output
                    .map(|o| o.reshape.as_ref().map_or(&o.dims, |r| &r.shape).clone())
                    .unwrap_or_default()
            })
            .collect();
        Ok(Self {
            name: Arc::from(config.name.as_str()),
            models,
            decoupled,
            max_inflight: crate::config::ensembling(config)
                .map_or(0, |e| e.max_inflight_requests as usize),
            batching: config.max_batch_size > 0,
            output_dims,
            order: (!decoupled).then(|| Arc::new(SequenceOrder::new(plan.steps.len()))),
            plan: Arc::new(plan),
        })
    }

    /// Whether a step is decoupled: the ensemble then streams its responses, and its
    /// configuration says `model_transaction_policy { decoupled: true }` as Triton's does.
    pub fn decoupled(&self) -> bool {
        self.decoupled
    }

    /// The validated graph.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Starts one validated request: the steps its inputs make ready are submitted now;
    /// the returned run finishes the rest. Step times are summed into `times`; only the
    /// steps feeding the `wanted` outputs (all, for `None`) run, as Triton prunes them.
    pub fn start(
        &self,
        request: InferRequest,
        times: Arc<StepTimes>,
        wanted: Option<&[String]>,
    ) -> Run {
        Run::start(self, request, times, wanted)
    }
}

#[cfg(test)]
mod order_tests;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
