//! Data-flow execution of one ensemble request. Each step is submitted, as an ordinary
//! inference request, to its composing model the moment its last input arrives (so
//! independent steps run concurrently and each model's scheduler, cache and statistics
//! apply); the step answers are awaited together, and each answer's outputs may make
//! further steps ready. Tensors move between steps as `Bytes` handles, never copied.
//! The first failing step fails the request with that step's error.
//!
//! A decoupled step answers with a stream: each of its responses starts an iteration of
//! its own, and the steps downstream run once per iteration on that response's tensors
//! (Triton's streaming ensembles). Every tensor value is keyed by its iteration; whenever
//! the ensemble outputs of one iteration are all there, they are a response. Triton
//! numbers each tensor's values in arrival order, which can pair tensors of different
//! responses when downstream steps finish out of order; here a value inherits the
//! iteration of the step inputs it was computed from.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{self, SelectAll, Stream, StreamExt};

use super::graph::{Needed, Plan};
use super::order::Ticket;
use super::{batch_dims, Ensemble, StepModels};
use crate::error::{Error, Result};
use crate::request::{InferRequest, InputTensor, OutputTensor, Parameters};
use crate::sequence_flags::SequenceFlags;
use crate::stats::StepTimes;
use crate::trace::RequestTrace;
use nereid_proto::DataType;

/// One ensemble tensor's value.
#[derive(Debug, Clone)]
struct Value {
    datatype: DataType,
    shape: Vec<i64>,
    data: Bytes,
    /// The batch size of the request that produced it (0: a non-batching model's).
    batch: u64,
}

/// A tensor (by index) in one iteration: 0 for the request's own, a fresh number for
/// each response of a decoupled step and what is computed from it.
type Key = (usize, u64);

/// What a running step yields.
enum StepEvent {
    /// An answer of step `.0` run in iteration `.1`.
    Answer(usize, u64, Result<Vec<OutputTensor>>, AnswerKind),
    /// Step `.0`'s request ended with a final flag alone (a decoupled step's).
    Ended(usize),
}

/// How a step's answer stands in its request: whether its outputs start an iteration of
/// their own (a decoupled step's response), the batch size of the step's request, and
/// whether the step's request ends with it. Knowing the end together with the answer
/// lets the ensemble's response made from it be its final one, as in Triton, where a
/// client that did not ask for empty final responses sees `triton_final_response` only
/// on a response.
#[derive(Clone, Copy)]
struct AnswerKind {
    fresh: bool,
    batch: StepBatch,
    ends: bool,
}

/// The batch size of a step's request, which its outputs carry on.
type StepBatch = u64;

/// What a running step yields: one answer, or a decoupled step's responses.
type StepEvents = Pin<Box<dyn Stream<Item = StepEvent> + Send>>;

/// The state of one ensemble request in flight.
pub struct Run {
    name: Arc<str>,
    plan: Arc<Plan>,
    /// The steps and outputs this request needs, when it asked for some outputs only.
    needed: Option<Needed>,
    models: Option<Arc<dyn StepModels>>,
    /// Whether a step is decoupled: then the run may answer any number of times.
    decoupled: bool,
    /// Whether the ensemble batches, and its outputs' `dims` (see `batch_dims`).
    batching: bool,
    output_dims: Arc<[Vec<i64>]>,
    /// The request's id and parameters, passed on to every step.
    id: String,
    parameters: Parameters,
    /// The request's trace, if sampled: each step traces under a child id.
    trace: Option<RequestTrace>,
    /// Tensor values not used up yet (`None` for an omitted optional ensemble input).
    values: HashMap<Key, Option<Value>>,
    /// How many more steps (and the response, for an ensemble output) will read each.
    uses_left: HashMap<Key, usize>,
    /// Inputs each step still waits for, per iteration, once one of them arrived.
    waiting: HashMap<Key, usize>,
    running: SelectAll<StepEvents>,
    /// Steps submitted whose request has not ended (`running` may still hold a stream
    /// that has yielded its last event).
    steps_running: usize,
    /// `max_inflight_requests`: at most this many requests of one step at once (0: no
    /// bound); the others wait in `deferred` with their iteration.
    max_inflight: usize,
    inflight: Vec<usize>,
    deferred: Vec<VecDeque<u64>>,
    /// The last iteration number given out.
    iterations: u64,
    /// Complete sets of ensemble outputs not yet sent.
    ready: Vec<Vec<OutputTensor>>,
    /// Whether any response was made.
    answered: bool,
    /// Queue and compute times of the steps, summed.
    times: Arc<StepTimes>,
    /// A step that failed or could not even be submitted.
    failed: Option<Error>,
    /// The request's turn among its sequence's requests (see `order`), and the steps
    /// ready but waiting for it.
    ticket: Option<Ticket>,
    gated: Vec<usize>,
}

impl Run {
    /// Takes the request's inputs and submits every step they make ready, before
    /// returning (so requests admitted one after another reach the steps in order). Only
    /// the steps feeding the `wanted` outputs (all, for `None`) run.
    pub fn start(
        ensemble: &Ensemble,
        request: InferRequest,
        times: Arc<StepTimes>,
        wanted: Option<&[String]>,
    ) -> Self {
        let sequence = SequenceFlags::of(&request, "").ok();
        let ticket = ensemble
            .order
            .as_ref()
            .zip(sequence)
            .map(|(order, flags)| order.ticket(flags.id));
        let mut run = Run {
            name: ensemble.name.clone(),
            models: ensemble.models.upgrade(),
            decoupled: ensemble.decoupled,
            batching: ensemble.batching,
            output_dims: ensemble.output_dims.clone(),
            id: request.id,
            parameters: request.parameters,
            trace: request.trace,
            values: HashMap::new(),
            uses_left: HashMap::new(),
            waiting: HashMap::new(),
            running: SelectAll::new(),
            steps_running: 0,
            max_inflight: ensemble.max_inflight,
            inflight: vec![0; ensemble.plan.steps.len()],
            deferred: vec![VecDeque::new(); ensemble.plan.steps.len()],
            iterations: 0,
            ready: Vec::new(),
            answered: false,
            times,
            failed: None,
            ticket,
            gated: Vec::new(),
            needed: ensemble.plan.needed(wanted),
            plan: ensemble.plan.clone(),
        };

        if run.models.is_none() {
            run.failed = Some(Error::unavailable("the model repository is shutting down"));
            return run;
        }
        let mut inputs = request.inputs;
        let batch = batch_dims::batch_of(run.batching, inputs.first().map(|i| &i.shape[..]));
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
                    batch,
                });
            run.arrive((id, 0), value);
        }
        run
    }

    /// Records tensor value `key` (absent for an omitted optional input), submits the
    /// steps of its iteration that were waiting only for it, and makes a response when
    /// it completes the ensemble outputs of its iteration.
    fn arrive(&mut self, key: Key, value: Option<Value>) {
        let (id, iteration) = key;
        let plan = self.plan.clone();
        let is_output = plan
            .outputs
            .iter()
            .position(|&o| o == id)
            .is_some_and(|at| self.output_wanted(at));
        let readers = plan.consumers[id]
            .iter()
            .filter(|&&step| self.step_needed(step));
        let uses = readers.count() + usize::from(is_output);
        if uses == 0 {
            return;
        }
        self.values.insert(key, value);
        self.uses_left.insert(key, uses);
        for &step in &plan.consumers[id] {
            if !self.step_needed(step) {
                continue;
            }
            let needed = plan.steps[step].inputs.len();
            let missing = self.waiting.entry((step, iteration)).or_insert(needed);
            *missing = missing.saturating_sub(1);
            if *missing == 0 {
                self.waiting.remove(&(step, iteration));
                self.launch(step, iteration);
            }
        }
        if is_output {
            self.collect_outputs(iteration);
        }
    }

    /// Whether step `index` runs for this request.
    fn step_needed(&self, index: usize) -> bool {
        self.needed.as_ref().is_none_or(|n| n.steps[index])
    }

    /// Whether the request asked for the ensemble output at `at` in the plan's order.
    fn output_wanted(&self, at: usize) -> bool {
        self.needed.as_ref().is_none_or(|n| n.outputs[at])
    }

    /// The value of `key` for one reader, dropped after its last one.
    fn read(&mut self, key: Key) -> Option<Value> {
        let value = self.values.get(&key).cloned().flatten();
        if let Some(left) = self.uses_left.get_mut(&key) {
            *left -= 1;
            if *left == 0 {
                self.uses_left.remove(&key);
                self.values.remove(&key);
            }
        }
        value
    }

    /// Makes a response of `iteration`'s ensemble outputs once they are all there.
    fn collect_outputs(&mut self, iteration: u64) {
        let plan = self.plan.clone();
        let mut wanted = plan
            .outputs
            .iter()
            .enumerate()
            .filter(|&(at, _)| self.output_wanted(at));
        if !wanted.all(|(_, &id)| self.values.contains_key(&(id, iteration))) {
            return;
        }
        let mut outputs = Vec::with_capacity(plan.outputs.len());
        for (at, &id) in plan.outputs.iter().enumerate() {
            if !self.output_wanted(at) {
                continue;
            }
            let Some(value) = self.read((id, iteration)) else {
                // Triton's verbose line (L0_simple_ensemble greps it).
                tracing::debug!(
                    "Composing models did not output tensor {}",
                    plan.tensors[id]
                );
                continue;
            };
            let dims = self.output_dims.get(at).map_or(&[][..], |d| &d[..]);
            outputs.push(OutputTensor {
                name: plan.tensors[id].clone(),
                datatype: value.datatype,
                shape: batch_dims::reshape(dims, self.batching, value.batch, value.shape),
                data: value.data,
                device: None,
            });
        }
        self.ready.push(outputs);
    }

    /// Submits step `index` of `iteration` to its composing model, or defers it while
    /// the step has `max_inflight` requests running.
    fn launch(&mut self, index: usize, iteration: u64) {
        if self.failed.is_some() {
            return;
        }
        // Only ensembles without decoupled steps hold tickets: their one iteration is 0.
        if let Some(ticket) = &mut self.ticket {
            if !ticket.take_turn(index) {
                self.gated.push(index);
                return;
            }
        }
        if self.max_inflight > 0 && self.inflight[index] >= self.max_inflight {
            self.deferred[index].push_back(iteration);
            return;
        }
        self.inflight[index] += 1;
        let Some(models) = self.models.clone() else {
            return;
        };
        let plan = self.plan.clone();
        let step = &plan.steps[index];
        let model = match models.step_model(&step.model, step.version) {
            Ok(model) => model,
            Err(e) => {
                self.failed = Some(e);
                return;
            }
        };
        let spec = model.spec();
        let batches = spec.max_batch_size > 0;
        let mut inputs = Vec::with_capacity(step.inputs.len());
        for (name, id) in &step.inputs {
            if let Some(v) = self.read((*id, iteration)) {
                let dims = spec.input(name).map_or(&[][..], |t| &t.dims[..]);
                inputs.push(InputTensor {
                    name: name.clone(),
                    datatype: v.datatype,
                    shape: batch_dims::reshape(dims, batches, v.batch, v.shape),
                    data: v.data,
                    device: None,
                });
            }
        }
        let batch = batch_dims::batch_of(batches, inputs.first().map(|i| &i.shape[..]));
        let request = InferRequest {
            model_name: step.model.clone(),
            model_version: step.version,
            id: self.id.clone(),
            parameters: self.parameters.clone(),
            inputs,
            requested_outputs: Some(step.outputs.iter().map(|(n, _)| n.clone()).collect()),
            classification: Vec::new(),
            trace: self.trace.as_ref().map(RequestTrace::child),
            output_query: Some(crate::output_query::any_placement()),
        };
        if !model.spec().decoupled {
            let answer = model.submit_step(request, Instant::now(), self.times.clone());
            let kind = AnswerKind {
                fresh: false,
                batch,
                ends: true,
            };
            let answer = stream::once(async move {
                let outputs = answer.await.map(|r| r.outputs.into_vec());
                StepEvent::Answer(index, iteration, outputs, kind)
            });
            self.running.push(Box::pin(answer));
            self.steps_running += 1;
            return;
        }
        match model.submit_step_stream(request, Instant::now()) {
            Ok(responses) => {
                // The sender always ends its stream with a message marked last (an empty
                // final one when dropped first), so every step request ends.
                let messages = stream::unfold(responses, |mut rx| async move {
                    rx.recv().await.map(|message| (message, rx))
                });
                let events = messages.map(move |message| match message.result {
                    Some(answer) => {
                        let kind = AnswerKind {
                            fresh: true,
                            batch,
                            ends: message.last,
                        };
                        StepEvent::Answer(
                            index,
                            iteration,
                            answer.map(|r| r.outputs.into_vec()),
                            kind,
                        )
                    }
                    None => StepEvent::Ended(index),
                });
                self.running.push(Box::pin(events));
                self.steps_running += 1;
            }
            Err(e) => self.failed = Some(e),
        }
    }

    /// Step `index`'s request ended: the next of its deferred iterations may start.
    fn step_ended(&mut self, index: usize) {
        self.steps_running = self.steps_running.saturating_sub(1);
        self.inflight[index] -= 1;
        if let Some(iteration) = self.deferred[index].pop_front() {
            self.launch(index, iteration);
        }
    }

    /// Records what step `index` of `iteration` answered.
    fn produced(
        &mut self,
        (index, iteration): (usize, u64),
        AnswerKind { fresh, batch, .. }: AnswerKind,
        outputs: Vec<OutputTensor>,
    ) {
        let iteration = if fresh {
            self.iterations += 1;
            self.iterations
        } else {
            iteration
        };
        let plan = self.plan.clone();
        let mut values: Vec<Option<Value>> = vec![None; plan.steps[index].outputs.len()];
        for output in outputs {
            let planned = plan.steps[index]
                .outputs
                .iter()
                .position(|(n, _)| *n == output.name);
            if let Some(at) = planned {
                values[at] = Some(Value {
                    datatype: output.datatype,
                    shape: output.shape,
                    data: output.data,
                    batch,
                });
            }
        }
        // An output the step's model left out is an absent tensor, as in Triton: the
        // steps reading it run without it (an optional input), and an ensemble output
        // made of it is left out of the response.
        for (&(_, id), value) in plan.steps[index].outputs.iter().zip(values) {
            self.arrive((id, iteration), value);
        }
    }

    /// Awaits the steps, handing `respond` each response as it is complete (one per
    /// iteration that completes the ensemble outputs) and marking the last one; `None`
    /// is a final flag alone, for a decoupled ensemble whose last response went out
    /// before its last step ended. A failing step ends the run with its error.
    pub async fn drive(mut self, mut respond: impl FnMut(Option<Result<Vec<OutputTensor>>>, bool)) {
        loop {
            if let Some(e) = self.failed.take() {
                respond(Some(Err(self.step_error(e))), true);
                return;
            }
            let ready = std::mem::take(&mut self.ready);
            self.answered |= !ready.is_empty();
            let count = ready.len();
            let done = self.steps_running == 0 && self.gated.is_empty();
            for (i, outputs) in ready.into_iter().enumerate() {
                respond(Some(Ok(outputs)), done && i + 1 == count);
            }
            if done {
                if count == 0 {
                    match self.missing_output() {
                        Some(e) if !self.answered => respond(Some(Err(e)), true),
                        _ => respond(None, true),
                    }
                }
                return;
            }
            let event = match self.ticket.as_ref().filter(|_| !self.gated.is_empty()) {
                Some(ticket) => {
                    let wake = ticket.woken();
                    tokio::select! {
                        event = self.running.next(), if self.steps_running > 0 => event,
                        () = wake.notified() => {
                            for index in std::mem::take(&mut self.gated) {
                                self.launch(index, 0);
                            }
                            continue;
                        }
                    }
                }
                None => self.running.next().await,
            };
            match event {
                Some(StepEvent::Answer(index, iteration, answer, kind)) => {
                    match answer {
                        Ok(outputs) => self.produced((index, iteration), kind, outputs),
                        Err(e) => self.failed = Some(e),
                    }
                    if kind.ends {
                        self.step_ended(index);
                    }
                }
                Some(StepEvent::Ended(index)) => self.step_ended(index),
                // Every step stream is over: nothing more can come, whatever the count says.
                None => self.steps_running = 0,
            }
        }
    }

    /// Awaits the steps of an ensemble without decoupled steps and returns its one
    /// response's outputs, in configuration order.
    pub async fn finish(self) -> Result<Vec<OutputTensor>> {
        let mut first = None;
        self.drive(|result, _| {
            if first.is_none() {
                first = result;
            }
        })
        .await;
        first.unwrap_or_else(|| Err(Error::internal("the ensemble made no response")))
    }

    /// Triton's deadlock error for an ensemble without decoupled steps whose steps all
    /// ended without producing every output (a decoupled one may answer nothing).
    fn missing_output(&self) -> Option<Error> {
        if self.decoupled {
            return None;
        }
        let missing = self
            .plan
            .outputs
            .iter()
            .enumerate()
            .find(|&(at, &id)| self.output_wanted(at) && !self.values.contains_key(&(id, 0)))
            .map(|(_, id)| id)?;
        Some(Error::internal(format!(
            "in ensemble '{}', no step produced output '{}'",
            self.name, self.plan.tensors[*missing]
        )))
    }

    /// Triton's wording for a failed step: the step's error, kind kept, prefixed with
    /// the ensemble.
    fn step_error(&self, e: Error) -> Error {
        e.prefixed(&format!("in ensemble '{}', ", self.name))
    }
}
