//! Data-flow execution of one ensemble request. Each step is submitted, as an ordinary
//! inference request, to its composing model the moment its last input arrives (so
//! independent steps run concurrently and each model's scheduler, cache and statistics
//! apply); the step answers are awaited together, and each answer's outputs may make
//! further steps ready. Tensors move between steps as `Bytes` handles, never copied.
//! The first failing step fails the request with that step's error; no partial response
//! is ever returned.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};

use super::graph::Plan;
use super::{Ensemble, StepModels};
use crate::error::{Error, Result};
use crate::request::{InferRequest, InputTensor, OutputTensor, Parameters};
use crate::stats::StepTimes;
use crate::trace::RequestTrace;
use crate::DataType;

/// One ensemble tensor's value.
#[derive(Debug, Clone)]
struct Value {
    datatype: DataType,
    shape: Vec<i64>,
    data: Bytes,
}

/// A step's answer, tagged with the step's index.
type StepAnswer = Pin<Box<dyn Future<Output = (usize, Result<Vec<OutputTensor>>)> + Send>>;

/// The state of one ensemble request in flight.
pub struct Run {
    name: Arc<str>,
    plan: Arc<Plan>,
    models: Option<Arc<dyn StepModels>>,
    /// The request's id and parameters, passed on to every step.
    id: String,
    parameters: Parameters,
    /// The request's trace, if sampled: each step traces under a child id.
    trace: Option<RequestTrace>,
    /// Tensor values by tensor index (`None` until written, or for an omitted optional
    /// ensemble input).
    values: Vec<Option<Value>>,
    /// Inputs each step still waits for.
    waiting: Vec<usize>,
    running: FuturesUnordered<StepAnswer>,
    /// Queue and compute times of the steps, summed.
    times: Arc<StepTimes>,
    /// A step that could not even be submitted.
    failed: Option<Error>,
}

impl Run {
    /// Takes the request's inputs and submits every step they make ready, before
    /// returning (so requests admitted one after another reach the steps in order).
    pub fn start(ensemble: &Ensemble, request: InferRequest, times: Arc<StepTimes>) -> Self {
        let plan = ensemble.plan.clone();
        let tensor_count = plan.tensors.len();
        let mut run = Run {
            name: ensemble.name.clone(),
            models: ensemble.models.upgrade(),
            id: request.id,
            parameters: request.parameters,
            trace: request.trace,
            values: vec![None; tensor_count],
            waiting: plan.steps.iter().map(|s| s.inputs.len()).collect(),
            running: FuturesUnordered::new(),
            times,
            failed: None,
            plan,
        };
        if run.models.is_none() {
            run.failed = Some(Error::unavailable("the model repository is shutting down"));
            return run;
        }
        let mut inputs = request.inputs;
        for id in run.plan.inputs.clone() {
            let name = &run.plan.tensors[id];
            // Inputs were validated against the ensemble, so only optional ones can be
            // missing; their consumers run without them.
            let value = inputs
                .iter()
                .position(|i| &i.name == name)
                .map(|at| inputs.swap_remove(at))
                .map(|i| Value {
                    datatype: i.datatype,
                    shape: i.shape,
                    data: i.data,
                });
            run.arrive(id, value);
        }
        run
    }

    /// Records tensor `id` (absent for an omitted optional input) and submits the steps
    /// that were waiting only for it.
    fn arrive(&mut self, id: usize, value: Option<Value>) {
        self.values[id] = value;
        let plan = self.plan.clone();
        for &step in &plan.consumers[id] {
            self.waiting[step] -= 1;
            if self.waiting[step] == 0 {
                self.launch(step);
            }
        }
    }

    /// Submits step `index` to its composing model.
    fn launch(&mut self, index: usize) {
        if self.failed.is_some() {
            return;
        }
        let Some(models) = &self.models else {
            return;
        };
        let step = &self.plan.steps[index];
        let inputs = step
            .inputs
            .iter()
            .filter_map(|(name, id)| {
                self.values[*id].as_ref().map(|v| InputTensor {
                    name: name.clone(),
                    datatype: v.datatype,
                    shape: v.shape.clone(),
                    data: v.data.clone(),
                })
            })
            .collect();
        let request = InferRequest {
            model_name: step.model.clone(),
            model_version: step.version,
            id: self.id.clone(),
            parameters: self.parameters.clone(),
            inputs,
            requested_outputs: Some(step.outputs.iter().map(|(n, _)| n.clone()).collect()),
            classification: Vec::new(),
            trace: self.trace.as_ref().map(RequestTrace::child),
        };
        match models.step_model(&step.model, step.version) {
            Ok(model) => {
                let answer = model.submit_step(request, Instant::now(), self.times.clone());
                self.running.push(Box::pin(
                    async move { (index, answer.await.map(|r| r.outputs)) },
                ));
            }
            Err(e) => self.failed = Some(e),
        }
    }

    /// Awaits the steps until every one has answered, and returns the ensemble's outputs
    /// in configuration order.
    pub async fn finish(mut self) -> Result<Vec<OutputTensor>> {
        loop {
            if let Some(e) = self.failed.take() {
                return Err(self.step_error(e));
            }
            let Some((index, answer)) = self.running.next().await else {
                break;
            };
            let outputs = answer.map_err(|e| self.step_error(e))?;
            let plan = self.plan.clone();
            for output in outputs {
                let planned = plan.steps[index]
                    .outputs
                    .iter()
                    .find(|(n, _)| *n == output.name);
                if let Some(&(_, id)) = planned {
                    let value = Value {
                        datatype: output.datatype,
                        shape: output.shape,
                        data: output.data,
                    };
                    self.arrive(id, Some(value));
                }
            }
        }
        self.plan
            .outputs
            .iter()
            .map(|&id| {
                let name = &self.plan.tensors[id];
                let value = self.values[id].take().ok_or_else(|| {
                    Error::internal(format!(
                        "in ensemble '{}', no step produced output '{name}'",
                        self.name
                    ))
                })?;
                Ok(OutputTensor {
                    name: name.clone(),
                    datatype: value.datatype,
                    shape: value.shape,
                    data: value.data,
                })
            })
            .collect()
    }

    /// Triton's wording for a failed step: the step's error, kind kept, prefixed with
    /// the ensemble.
    fn step_error(&self, e: Error) -> Error {
        e.prefixed(&format!("in ensemble '{}', ", self.name))
    }
}
