//! What a backend measures and reports for the statistics and metrics to count: an
//! execution's three phases and the memory held for sequence state. Here, below the
//! backend contract, so the statistics need nothing from it.

use std::time::{Duration, Instant};

/// Time an execution spent in its three phases, as the statistics extension reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputeTiming {
    /// Preparing inputs (copies into backend tensors).
    pub input_ns: u64,
    /// Running the model.
    pub infer_ns: u64,
    /// Extracting outputs.
    pub output_ns: u64,
    /// Batch entries the backend really ran, when it answered some requests without
    /// running the model (the stateful backend's END requests); `None`: all of them.
    pub ran: Option<usize>,
}

impl ComputeTiming {
    /// Sets the three phases from the instants that separate them: inputs prepared, model
    /// run, outputs extracted.
    pub fn set_phases(&mut self, started: Instant, prepared: Instant, ran: Instant, done: Instant) {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.input_ns = nanos(prepared - started);
        self.infer_ns = nanos(ran - prepared);
        self.output_ns = nanos(done - ran);
    }
}

/// Memory a backend holds for sequence state, as the metrics report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateUsage {
    /// State buffers allocated (the initial one plus any grown lazily).
    pub buffers: u64,
    /// Bytes those buffers hold.
    pub bytes: u64,
    /// Sequences whose state is stored.
    pub sequences: u64,
    /// Sequences the allocated buffers can hold.
    pub capacity: u64,
}

impl std::ops::Add for StateUsage {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            buffers: self.buffers + other.buffers,
            bytes: self.bytes + other.bytes,
            sequences: self.sequences + other.sequences,
            capacity: self.capacity + other.capacity,
        }
    }
}
