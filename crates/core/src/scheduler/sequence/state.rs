//! Implicit state (`sequence_batching { state [...] }`): tensors the server keeps per
//! sequence. Each request of a sequence gets the state its previous request produced (the
//! model's `output_name` output) as input `input_name`; a START, or the first request,
//! gets the initial state (zeros, or `initial_state`'s data file). Neither tensor is seen
//! by clients. The stored state is dropped at END or when the sequence is released idle.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::model::{InitialState, StateSpec};
use crate::request::{InputTensor, OutputTensor};
use crate::sequence_flags::{SequenceFlags, SequenceId};
use nereid_proto::DataType;

/// One state tensor pair.
#[derive(Debug, Clone)]
struct StateTensor {
    input: String,
    output: String,
    datatype: DataType,
    /// Shape of the initial state (`initial_state.dims`, or `dims` with -1 read as 1).
    initial_dims: Vec<i64>,
    initial: Bytes,
    /// The model configuration also lists `output` among its outputs: clients get it too.
    shown: bool,
}

/// A sequence's stored state: which START it belongs to, and each tensor's shape and bytes.
#[derive(Debug, Default)]
struct Stored {
    generation: u64,
    tensors: Option<Vec<(Vec<i64>, Bytes)>>,
}

/// The state tensors of a model and the state of every live sequence.
#[derive(Debug, Default)]
pub struct States {
    tensors: Vec<StateTensor>,
    batching: bool,
    // Held briefly: to hand a state to a request or store what the model returned.
    stored: Mutex<(u64, HashMap<SequenceId, Stored>)>,
}

/// Where a request's state goes after execution.
#[derive(Debug, Clone)]
pub struct StateTicket {
    id: SequenceId,
    generation: u64,
    end: bool,
}

impl States {
    /// The states `specs` of a model in `model_dir` (where `initial_state` data files are
    /// read from, once, here).
    pub fn new(specs: &[StateSpec], model_dir: Option<&Path>, batching: bool) -> Result<Self> {
        let mut tensors = Vec::with_capacity(specs.len());
        for state in specs {
            tensors.push(StateTensor {
                input: state.input_name.clone(),
                output: state.output_name.clone(),
                datatype: state.datatype,
                initial_dims: state.initial.dims().to_vec(),
                initial: initial_bytes(state, model_dir)?,
                shown: false,
            });
        }
        Ok(Self {
            tensors,
            batching,
            stored: Mutex::default(),
        })
    }

    /// Marks the states whose output tensor is also a model output (`is_output`), which
    /// clients receive besides the state being kept (Triton's L0_implicit_state).
    pub fn shown_to_clients(mut self, is_output: impl Fn(&str) -> bool) -> Self {
        for t in &mut self.tensors {
            t.shown = is_output(&t.output);
        }
        self
    }

    fn initial_shape(&self, t: &StateTensor) -> Vec<i64> {
        if self.batching {
            std::iter::once(1)
                .chain(t.initial_dims.iter().copied())
                .collect()
        } else {
            t.initial_dims.clone()
        }
    }

    fn initial(&self) -> Vec<(Vec<i64>, Bytes)> {
        self.tensors
            .iter()
            .map(|t| (self.initial_shape(t), t.initial.clone()))
            .collect()
    }

    /// The state inputs of one request and the ticket to store its new state with
    /// (`None` flags: a padding request, which gets the initial state and stores nothing).
    pub fn inputs(&self, flags: Option<&SequenceFlags>) -> (Vec<InputTensor>, Option<StateTicket>) {
        if self.tensors.is_empty() {
            return (Vec::new(), None);
        }
        let (values, ticket) = match flags {
            None => (self.initial(), None),
            Some(flags) => {
                let mut guard = self.stored.lock();
                let (counter, stored) = &mut *guard;
                let entry = stored.entry(flags.id.clone()).or_default();
                let values = if flags.start || entry.tensors.is_none() {
                    *counter += 1;
                    entry.generation = *counter;
                    entry.tensors = None;
                    self.initial()
                } else {
                    // A copy (of reference-counted bytes): if this request fails, the
                    // sequence keeps its previous state.
                    entry.tensors.clone().unwrap_or_else(|| self.initial())
                };
                let ticket = StateTicket {
                    id: flags.id.clone(),
                    generation: entry.generation,
                    end: flags.end,
                };
                (values, Some(ticket))
            }
        };
        let inputs = self
            .tensors
            .iter()
            .zip(values)
            .map(|(t, (shape, data))| InputTensor {
                name: t.input.clone(),
                datatype: t.datatype,
                shape,
                data,
                device: None,
            })
            .collect();
        (inputs, ticket)
    }

    /// Takes the state outputs out of a request's outputs (leaving those shown to clients)
    /// and keeps them for the sequence's next request (or drops the state at END).
    pub fn keep(&self, ticket: &StateTicket, outputs: &mut Vec<OutputTensor>) {
        let mut values = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            if let Some(i) = outputs.iter().position(|o| o.name == t.output) {
                if t.shown {
                    values.push((outputs[i].shape.clone(), outputs[i].data.clone()));
                } else {
                    let o = outputs.remove(i);
                    values.push((o.shape, o.data));
                }
            }
        }
        let mut guard = self.stored.lock();
        let stored = &mut guard.1;
        let current = stored
            .get(&ticket.id)
            .is_some_and(|s| s.generation == ticket.generation);
        if !current {
            return; // a newer START of the same ID owns the state now
        }
        if ticket.end || values.len() != self.tensors.len() {
            stored.remove(&ticket.id);
        } else if let Some(s) = stored.get_mut(&ticket.id) {
            s.tensors = Some(values);
        }
    }

    /// Drops the state of a sequence released without END.
    pub fn forget(&self, id: &SequenceId) {
        self.stored.lock().1.remove(id);
    }
}

/// The bytes of `state`'s initial value: zeros, or its data file's first bytes. The
/// length was bounded at load ([`crate::model::MAX_STATE_BYTES`]); the memory is still
/// reserved fallibly, so a machine without it fails the load instead of aborting.
fn initial_bytes(state: &StateSpec, model_dir: Option<&Path>) -> Result<Bytes> {
    let expected = state.initial_bytes;
    let mut data = Vec::new();
    data.try_reserve_exact(expected).map_err(|_| {
        Error::invalid_arg(format!(
            "cannot allocate the {expected} bytes of the initial value of state '{}'",
            state.input_name
        ))
    })?;
    match &state.initial {
        // BYTES zeros are empty strings: a zero length per element.
        InitialState::Zeros(_) => data.resize(expected, 0),
        InitialState::DataFile { file, .. } => {
            let path = model_dir
                .map(|d| d.join("initial_state").join(file))
                .ok_or_else(|| {
                    Error::invalid_arg("initial_state data files need a model directory")
                })?;
            let unreadable = |e: std::io::Error| {
                Error::invalid_arg(format!(
                    "unable to read initial_state data file {}: {e}",
                    path.display()
                ))
            };
            // Only the bytes the state needs: the file may be longer (or endless).
            std::fs::File::open(&path)
                .and_then(|f| f.take(expected as u64).read_to_end(&mut data))
                .map_err(unreadable)?;
            if data.len() < expected {
                return Err(Error::invalid_arg(format!(
                    "initial_state setting expects {expected} bytes, but the data provided from {}only has {} bytes.",
                    path.display(),
                    data.len()
                )));
            }
        }
    }
    Ok(Bytes::from(data))
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
