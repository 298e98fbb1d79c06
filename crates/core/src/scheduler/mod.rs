//! Schedulers decide which requests execute together and hand them to instance workers.
//! The contract is small (enqueue, stop), as in Triton; the choice is made at load time:
//! the dynamic batcher for models with `dynamic_batching`, the sequence batcher for
//! `sequence_batching`, otherwise the default scheduler. All feed [`InstancePool`]s.

mod default;
mod dynamic;
mod instances;
mod intake;
mod reply;
pub mod sequence;

use std::sync::Arc;
use std::time::Instant;

pub use default::{DefaultScheduler, DEFAULT_QUEUE_CAPACITY};
pub use dynamic::DynamicBatcher;
pub use instances::{InstancePool, Payload};
pub use reply::{Reply, ReplyOrder};
pub use sequence::SequenceBatcher;

use crate::error::Result;
use crate::request::{InferRequest, OutputTensor};
use crate::stats::StepTimes;

/// A validated request travelling through a scheduler to an instance.
#[derive(Debug)]
pub struct Job {
    /// The request.
    pub request: InferRequest,
    /// Its batch size (1 for models without batching).
    pub batch_size: usize,
    /// Where the answer goes; the caller awaits the other end.
    pub reply: Reply,
    /// When the server received the request (for end-to-end statistics).
    pub received_at: Instant,
    /// When the request entered the queue (for queue-time statistics).
    pub enqueued_at: Instant,
    /// The request's tracing span, so instance-side events are attributed to it.
    pub span: tracing::Span,
    /// A stand-in the sequence batcher adds for an idle slot: executed, never answered
    /// and not counted in the statistics.
    pub padding: bool,
    /// Runs on the job's outputs before the response is built (the sequence batcher
    /// takes the state outputs out there).
    pub on_outputs: Option<OutputHook>,
    /// For a step of an ensemble request: where its queue and compute times are summed
    /// for the ensemble's statistics.
    pub step_times: Option<Arc<StepTimes>>,
}

/// The callback inside an [`OutputHook`].
pub type OutputCallback = Box<dyn FnOnce(&mut Vec<OutputTensor>) + Send>;

/// A callback on a job's outputs.
pub struct OutputHook(pub OutputCallback);

impl std::fmt::Debug for OutputHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputHook")
    }
}

/// Triton's answer to a request that reaches a scheduler after shutdown began.
pub fn stopping_error() -> crate::error::Error {
    crate::error::Error::unavailable(
        "Server is stopping, scheduler for model has stopped accepting new inference requests",
    )
}

/// What every scheduler offers to the model handle.
pub trait Scheduler: Send + Sync {
    /// Queues `job`, or refuses it at once (full queue, stopping) with the error to return;
    /// a refused job is dropped, so nobody waits for its reply.
    fn enqueue(&self, job: Job) -> Result<()>;

    /// Stops accepting work; queued work still completes, then the workers exit.
    fn stop(&self);
}
