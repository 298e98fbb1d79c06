//! Sequence states declared `use_same_buffer_for_input_output`: one buffer per sequence
//! is both the state input a backend reads and the state buffer it writes, as in Triton
//! (core `sequence_state.cc`, where the input and output state share one memory). A
//! backend may update such a state in place, without `TRITONBACKEND_StateUpdate`; the
//! buffer's content when the response is sent is the sequence's next state, and the
//! next request of the sequence is handed the same buffer again.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use nereid_core::model::ModelSpec;
use nereid_core::request::{InferRequest, OutputTensor};
use nereid_core::sequence_flags::{SequenceFlags, SequenceId};
use nereid_core::DataType;
use parking_lot::Mutex;

/// A state buffer the backend writes through the pointer it is given.
pub(crate) struct StateMemory(UnsafeCell<Box<[u8]>>);

// SAFETY: the buffer is written only by the backend during the execution of the one
// request that holds it, and read here (snapshot, input view) by the thread that sends
// that request's response or after the execution ended; a backend that writes while it
// sends races as it would under Triton.
unsafe impl Send for StateMemory {}
// SAFETY: as for Send.
unsafe impl Sync for StateMemory {}

impl StateMemory {
    fn new(content: Box<[u8]>) -> Arc<Self> {
        Arc::new(Self(UnsafeCell::new(content)))
    }

    /// The buffer's address, for the backend to write.
    pub(crate) fn pointer(&self) -> *mut u8 {
        // SAFETY: the box is never replaced, so its address stays valid while `self` lives.
        unsafe { (*self.0.get()).as_mut_ptr() }
    }

    /// The buffer's length in bytes.
    pub(crate) fn len(&self) -> usize {
        // SAFETY: reading the length of the box, which never changes.
        unsafe { (&*self.0.get()).len() }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: see the type's Send reason: no write runs while this is read.
        unsafe { &*self.0.get() }
    }

    /// The buffer as an input tensor's data: the same address, not a copy.
    fn view(self: &Arc<Self>) -> Bytes {
        Bytes::from_owner(View(self.clone()))
    }
}

/// Owner of an input view, keeping the buffer alive as long as the view.
struct View(Arc<StateMemory>);

impl AsRef<[u8]> for View {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// One single-buffer state of one request while it executes.
pub(crate) struct SharedState {
    /// The model input the state is fed to.
    pub(crate) input_name: String,
    /// The state's name as the backend creates it (`TRITONBACKEND_StateNew`).
    pub(crate) output_name: String,
    datatype: DataType,
    shape: Mutex<Vec<i64>>,
    memory: Mutex<Arc<StateMemory>>,
    /// Whether its value already went out with a response.
    delivered: AtomicBool,
}

impl SharedState {
    /// The state's data as the request's input tensor sees it.
    pub(crate) fn input_view(&self) -> Bytes {
        self.memory.lock().view()
    }

    /// Records the shape the backend gives the state.
    pub(crate) fn set_shape(&self, shape: &[i64]) {
        *self.shape.lock() = shape.to_vec();
    }

    /// The buffer to write `size` bytes of state into: the input's own when the size is
    /// the same, else a new zeroed one that becomes the state (as Triton reallocates).
    pub(crate) fn buffer(&self, size: usize) -> Arc<StateMemory> {
        let mut memory = self.memory.lock();
        if memory.len() != size {
            *memory = StateMemory::new(vec![0; size].into_boxed_slice());
        }
        memory.clone()
    }

    /// The state's current value, once per request: the first response carries it.
    pub(crate) fn take_value(&self) -> Option<OutputTensor> {
        if self.delivered.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(OutputTensor {
            name: self.output_name.clone(),
            datatype: self.datatype,
            shape: self.shape.lock().clone(),
            data: Bytes::copy_from_slice(self.memory.lock().bytes()),
            device: None,
        })
    }
}

/// The single-buffer states of one instance's live sequences.
#[derive(Default)]
pub(crate) struct SingleBuffers {
    buffers: HashMap<(SequenceId, String), Arc<StateMemory>>,
}

impl SingleBuffers {
    /// The single-buffer states of `request`: its sequence's buffers, or at the start of
    /// a sequence (or the first time one is seen) buffers holding the state input the
    /// sequence batcher gave it. Empty for a model without such states and for a request
    /// outside any sequence (padding).
    pub(crate) fn for_request(
        &self,
        spec: &ModelSpec,
        request: &InferRequest,
    ) -> Vec<Arc<SharedState>> {
        let Some(sequence) = spec.scheduling.sequence() else {
            return Vec::new();
        };
        let Ok(flags) = SequenceFlags::of(request, &spec.name) else {
            return Vec::new();
        };
        sequence
            .states
            .iter()
            .filter(|s| s.same_buffer)
            .filter_map(|state| {
                let input = request.inputs.iter().find(|i| i.name == state.input_name)?;
                let key = (flags.id.clone(), state.output_name.clone());
                let memory = match self.buffers.get(&key) {
                    Some(memory) if !flags.start => memory.clone(),
                    _ => StateMemory::new(input.data.to_vec().into_boxed_slice()),
                };
                Some(Arc::new(SharedState {
                    input_name: state.input_name.clone(),
                    output_name: state.output_name.clone(),
                    datatype: state.datatype,
                    shape: Mutex::new(input.shape.clone()),
                    memory: Mutex::new(memory),
                    delivered: AtomicBool::new(false),
                }))
            })
            .collect()
    }

    /// Keeps the buffers `request` ended with for its sequence's next request, or drops
    /// them when the sequence ended.
    pub(crate) fn keep(
        &mut self,
        spec: &ModelSpec,
        request: &InferRequest,
        states: &[Arc<SharedState>],
    ) {
        let Ok(flags) = SequenceFlags::of(request, &spec.name) else {
            return;
        };
        for state in states {
            let key = (flags.id.clone(), state.output_name.clone());
            if flags.end {
                self.buffers.remove(&key);
            } else {
                self.buffers.insert(key, state.memory.lock().clone());
            }
        }
    }

    /// Drops the buffers of sequences the sequence batcher released.
    pub(crate) fn release(&mut self, ids: &[SequenceId]) {
        self.buffers.retain(|(id, _), _| !ids.contains(id));
    }
}
