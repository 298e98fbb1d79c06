//! What a model's GPU instances executed, kept apart for the metrics: Triton reports the
//! requests and executions of an instance on a GPU under series labelled with that GPU's
//! UUID (`gpu_uuid`), and the model's own series count the rest. The statistics API
//! stays per model: the model's counters count every request, and these count the GPU
//! instances' share again.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::{duration_ns, ComputeTiming, DurationCounter, StatDuration};

/// The counters of one model version's instances on one GPU; each GPU instance's worker
/// holds its GPU's.
#[derive(Debug, Default)]
pub struct DeviceStats {
    success: DurationCounter,
    queue: DurationCounter,
    compute_input: DurationCounter,
    compute_infer: DurationCounter,
    compute_output: DurationCounter,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    backend_failures: AtomicU64,
}

impl DeviceStats {
    /// A request an instance on this GPU executed was answered successfully.
    pub fn request_succeeded(&self, total: Duration, queue: Duration, timing: ComputeTiming) {
        self.success.record(duration_ns(total));
        self.queue.record(duration_ns(queue));
        self.compute_input.record(timing.input_ns);
        self.compute_infer.record(timing.infer_ns);
        self.compute_output.record(timing.output_ns);
    }

    /// The backend failed a request an instance on this GPU executed.
    pub fn backend_failed(&self) {
        self.backend_failures.fetch_add(1, Relaxed);
    }

    /// An instance on this GPU finished one execution of `inferences` client inferences.
    pub fn execution_finished(&self, inferences: usize) {
        self.inference_count.fetch_add(inferences as u64, Relaxed);
        self.execution_count.fetch_add(1, Relaxed);
    }

    /// Reads every counter, for GPU `device`.
    pub fn snapshot(&self, device: u32) -> DeviceSnapshot {
        DeviceSnapshot {
            device,
            success: self.success.snapshot(),
            queue: self.queue.snapshot(),
            compute_input: self.compute_input.snapshot(),
            compute_infer: self.compute_infer.snapshot(),
            compute_output: self.compute_output.snapshot(),
            inference_count: self.inference_count.load(Relaxed),
            execution_count: self.execution_count.load(Relaxed),
            backend_failures: self.backend_failures.load(Relaxed),
        }
    }
}

/// A read-out of one GPU's [`DeviceStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceSnapshot {
    /// The GPU's CUDA device id.
    pub device: u32,
    /// Successful requests and their total duration.
    pub success: StatDuration,
    /// Their time in the queue.
    pub queue: StatDuration,
    /// Their input preparation.
    pub compute_input: StatDuration,
    /// Their model execution.
    pub compute_infer: StatDuration,
    /// Their output extraction.
    pub compute_output: StatDuration,
    /// Batch elements inferred.
    pub inference_count: u64,
    /// Executions.
    pub execution_count: u64,
    /// Requests the backend failed.
    pub backend_failures: u64,
}
