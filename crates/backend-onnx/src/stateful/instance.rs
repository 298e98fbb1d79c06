//! One stateful instance: an ORT session, the state store of the sequences it serves,
//! and the execution that gathers their states into the batch, runs the model and
//! scatters the new states back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ort::session::{Session, SessionInputValue};

use nereid_core::backend::{ComputeTiming, InstanceBackend, Outcome, StateUsage};
use nereid_core::batch::Batch;
use nereid_core::request::{InferRequest, OutputTensor};
use nereid_core::sequence_flags::{SequenceFlags, SequenceId};
use nereid_core::{DataType, Error, Result};

use super::layout::Codec;
use super::plan::Plan;
use super::report::Report;
use super::store::{SlotId, StateStore};
use crate::convert::{from_value, to_value, to_value_view};

/// A sequence this instance serves.
struct Entry {
    slot: SlotId,
    /// No state stored yet (just started, or its first step failed): the model resets.
    fresh: bool,
}

/// A request that runs, as one row of the batch.
struct Row<'a> {
    request: usize,
    id: SequenceId,
    slot: SlotId,
    fresh: bool,
    end: bool,
    /// Its client inputs, in plan order.
    inputs: Vec<&'a Bytes>,
}

/// What becomes of a request before the model runs.
enum Admitted<'a> {
    Run(Row<'a>),
    Answered(Vec<OutputTensor>),
}

/// An instance of a stateful model.
pub struct StatefulInstance {
    session: Session,
    plan: Arc<Plan>,
    store: StateStore,
    sequences: HashMap<SequenceId, Entry>,
    report: Report,
}

impl StatefulInstance {
    /// An instance running `session`, with its state buffers reserved per `plan`.
    pub fn new(session: Session, plan: Arc<Plan>, name: &str) -> Result<Self> {
        let tensor_bytes: Vec<usize> = plan.states.iter().map(|s| s.stored_bytes()).collect();
        let per_sequence: usize = tensor_bytes.iter().sum();
        let store = StateStore::new(tensor_bytes, plan.capacity, plan.params.lazy).ok_or_else(|| {
            Error::internal(format!(
                "stateful model '{}': cannot allocate the state buffer for {} sequences of {per_sequence} bytes; lower max_candidate_sequences or use lazy allocation",
                plan.model, plan.capacity.initial
            ))
        })?;
        let report = Report::new(&plan.model, name, &plan.params);
        Ok(Self {
            session,
            store,
            sequences: HashMap::new(),
            report,
            plan,
        })
    }

    /// Finds the request's sequence (a START takes a slot) and checks its inputs.
    fn admit<'a>(&mut self, index: usize, request: &'a InferRequest) -> Result<Admitted<'a>> {
        let plan = self.plan.clone();
        let flags = SequenceFlags::of(request, &plan.model)?;
        if flags.end && !plan.params.infer_end_requests {
            self.forget(&flags.id);
            return Ok(Admitted::Answered(self.empty_outputs()));
        }
        let mut inputs = Vec::with_capacity(plan.inputs.len());
        for t in &plan.inputs {
            let input = request
                .inputs
                .iter()
                .find(|i| i.name == t.name)
                .ok_or_else(|| {
                    Error::invalid_arg(format!(
                        "stateful model '{}' needs input '{}'",
                        plan.model, t.name
                    ))
                })?;
            let along = input.shape.get(t.client_axis).copied().unwrap_or(0);
            if along != 1 || input.data.len() != t.axis.row_bytes() {
                return Err(Error::invalid_arg(format!(
                    "stateful model '{}' runs one step of one sequence per request: dimension {} of input '{}' (the batch dimension) must be 1, got shape {:?}",
                    plan.model, t.client_axis, t.name, input.shape
                )));
            }
            inputs.push(&input.data);
        }
        let entry = match self.sequences.get_mut(&flags.id) {
            Some(entry) => {
                entry.fresh |= flags.start;
                entry
            }
            None if flags.start => {
                let slot = self.store.allocate().ok_or_else(|| {
                    Error::unavailable(format!(
                        "Too many simultaneous connections: stateful model '{}' holds the state of {} sequences per instance",
                        plan.model, plan.capacity.max_sequences
                    ))
                })?;
                self.sequences
                    .entry(flags.id.clone())
                    .or_insert(Entry { slot, fresh: true })
            }
            None => {
                return Err(Error::invalid_arg(format!(
                    "sequence {} has no state in stateful model '{}': it must begin with a START request",
                    flags.id, plan.model
                )))
            }
        };
        Ok(Admitted::Run(Row {
            request: index,
            id: flags.id,
            slot: entry.slot,
            fresh: entry.fresh,
            end: flags.end,
            inputs,
        }))
    }

    /// Drops `id`'s state, if this instance holds it.
    fn forget(&mut self, id: &SequenceId) {
        if let Some(entry) = self.sequences.remove(id) {
            self.store.release(entry.slot);
        }
    }

    /// The successful, empty answer to an END that is not run (`infer_end_requests` 0).
    fn empty_outputs(&self) -> Vec<OutputTensor> {
        self.plan
            .outputs
            .iter()
            .map(|t| OutputTensor {
                name: t.name.clone(),
                datatype: t.datatype,
                shape: t.client_shape(0, self.plan.triton_batch),
                data: Bytes::new(),
                device: None,
            })
            .collect()
    }

    /// Runs `rows` together: gathers inputs and states, runs, scatters outputs and keeps
    /// the new states. Returns each row's outputs.
    fn run(
        &mut self,
        rows: &[Row<'_>],
        timing: &mut ComputeTiming,
    ) -> Result<Vec<Vec<OutputTensor>>> {
        let plan = &*self.plan;
        let started = Instant::now();
        let n = plan.rows_run(rows.len());
        let mut tensors: Vec<(&str, DataType, Vec<i64>, Bytes)> =
            Vec::with_capacity(plan.inputs.len() + plan.states.len() + 1);
        for (k, t) in plan.inputs.iter().enumerate() {
            let data = match rows {
                [row] if n == 1 => row.inputs[k].clone(),
                _ => {
                    let mut batch = vec![0; t.axis.batch_bytes(n)];
                    for (r, row) in rows.iter().enumerate() {
                        t.axis.put_row(&mut batch, n, r, row.inputs[k], Codec::Raw);
                    }
                    Bytes::from(batch)
                }
            };
            tensors.push((&t.name, t.datatype, t.onnx_shape(n), data));
        }
        for (k, s) in plan.states.iter().enumerate() {
            let mut batch = vec![0; s.axis.batch_bytes(n)];
            for (r, row) in rows.iter().enumerate().filter(|(_, row)| !row.fresh) {
                s.axis
                    .put_row(&mut batch, n, r, self.store.state(row.slot, k), s.codec);
            }
            tensors.push((&s.input, s.datatype, s.shape(n), Bytes::from(batch)));
        }
        let per_row = plan.reset.row_len();
        // Padding rows reset too, so they never read a stale state.
        let mut reset = vec![1u8; n * per_row];
        for (r, _) in rows.iter().enumerate().filter(|(_, row)| !row.fresh) {
            reset[r * per_row..(r + 1) * per_row].fill(0);
        }
        let mut reset_shape = vec![n as i64];
        reset_shape.extend(&plan.reset.trailing);
        let reset_value = to_value(DataType::Bool, &reset_shape, &reset)?;
        let mut inputs: Vec<(String, SessionInputValue<'_>)> =
            Vec::with_capacity(tensors.len() + 1);
        for (name, datatype, shape, data) in &tensors {
            let value = match to_value_view(*datatype, shape, data)? {
                Some(view) => view,
                None => to_value(*datatype, shape, data)?.into(),
            };
            inputs.push((name.to_string(), value));
        }
        inputs.push((plan.reset.name.clone(), reset_value.into()));
        let prepared = Instant::now();
        let mut outputs = self
            .session
            .run(inputs)
            .map_err(|e| Error::internal(format!("ERROR during Inference: {e}")))?;
        let ran = Instant::now();
        let mut answers: Vec<Vec<OutputTensor>> = rows
            .iter()
            .map(|_| Vec::with_capacity(plan.outputs.len()))
            .collect();
        let mut take = |name: &str, datatype: DataType, expected: Vec<i64>| {
            let value = outputs.remove(name).ok_or_else(|| {
                Error::internal(format!(
                    "stateful model '{}' did not produce '{name}'",
                    plan.model
                ))
            })?;
            let (shape, data) = from_value(datatype, value)?;
            if shape != expected {
                return Err(Error::internal(format!(
                    "stateful model '{}' produced '{name}' with shape {shape:?}, expected {expected:?}",
                    plan.model
                )));
            }
            Ok(data)
        };
        let mut client = Vec::with_capacity(plan.outputs.len());
        for t in &plan.outputs {
            client.push(take(&t.name, t.datatype, t.onnx_shape(n))?);
        }
        let mut states = Vec::with_capacity(plan.states.len());
        for s in &plan.states {
            states.push(take(&s.output, s.datatype, s.shape(n))?);
        }
        drop(outputs);
        for (t, data) in plan.outputs.iter().zip(&client) {
            for (r, answer) in answers.iter_mut().enumerate() {
                let part = match t.axis.contiguous_row(n, r) {
                    Some(range) => data.slice(range),
                    None => {
                        let mut row = vec![0; t.axis.row_bytes()];
                        t.axis.take_row(data, n, r, &mut row, Codec::Raw);
                        Bytes::from(row)
                    }
                };
                answer.push(OutputTensor {
                    name: t.name.clone(),
                    datatype: t.datatype,
                    shape: t.client_shape(1, plan.triton_batch),
                    data: part,
                    device: None,
                });
            }
        }
        for (k, (s, data)) in plan.states.iter().zip(&states).enumerate() {
            for (r, row) in rows.iter().enumerate().filter(|(_, row)| !row.end) {
                s.axis
                    .take_row(data, n, r, self.store.state_mut(row.slot, k), s.codec);
            }
        }
        let done = Instant::now();
        timing.set_phases(started, prepared, ran, done);
        Ok(answers)
    }

    /// The lazy-allocation step, logged.
    fn rebalance(&mut self) {
        if let Some(change) = self.store.rebalance() {
            self.report.buffers_changed(change, self.store.usage());
        }
    }
}

impl InstanceBackend for StatefulInstance {
    fn execute(&mut self, batch: &Batch<'_>, timing: &mut ComputeTiming) -> Vec<Outcome> {
        let requests = batch.requests();
        let mut answers: Vec<Option<Result<Vec<OutputTensor>>>> =
            requests.iter().map(|_| None).collect();
        let mut rows = Vec::with_capacity(requests.len());
        for (index, request) in requests.iter().enumerate() {
            match self.admit(index, request) {
                Ok(Admitted::Run(row)) => rows.push(row),
                Ok(Admitted::Answered(outputs)) => answers[index] = Some(Ok(outputs)),
                Err(e) => answers[index] = Some(Err(e)),
            }
        }
        if !rows.is_empty() {
            match self.run(&rows, timing) {
                Ok(outputs) => {
                    for (row, outputs) in rows.iter().zip(outputs) {
                        answers[row.request] = Some(Ok(outputs));
                        if let Some(entry) = self.sequences.get_mut(&row.id) {
                            entry.fresh = false;
                        }
                    }
                }
                Err(e) => {
                    for row in &rows {
                        answers[row.request] = Some(Err(e.clone()));
                    }
                }
            }
        }
        for row in rows.iter().filter(|r| r.end) {
            self.forget(&row.id);
        }
        timing.ran = Some(rows.len());
        self.rebalance();
        self.report.executed(
            rows.len(),
            self.plan.rows_run(rows.len()),
            timing,
            self.store.usage(),
        );
        answers
            .into_iter()
            .map(|a| {
                Outcome::from(
                    a.unwrap_or_else(|| Err(Error::internal("stateful request left unanswered"))),
                )
            })
            .collect()
    }

    fn sequence_capacity(&self) -> Option<usize> {
        Some(self.plan.capacity.max_sequences)
    }

    fn release_sequences(&mut self, ids: &[SequenceId]) {
        for id in ids {
            self.forget(id);
        }
        self.rebalance();
    }

    fn state_usage(&self) -> Option<StateUsage> {
        Some(self.store.usage())
    }
}
