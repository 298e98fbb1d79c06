//! Schedulers decide which requests execute together and hand them to instance workers.
//! The contract is small (enqueue, in-flight count, stop), as in Triton; the choice is made
//! at load time. Only the default scheduler exists so far; the dynamic and sequence
//! batchers plug in behind the same trait and feed the same [`InstancePool`].

mod default;
mod instances;

use std::time::Instant;

use tokio::sync::oneshot;

pub use default::{DefaultScheduler, DEFAULT_QUEUE_CAPACITY};
pub use instances::InstancePool;

use crate::error::Result;
use crate::request::{InferRequest, InferResponse};

/// A validated request travelling through a scheduler to an instance.
#[derive(Debug)]
pub struct Job {
    /// The request.
    pub request: InferRequest,
    /// Its batch size (1 for models without batching).
    pub batch_size: usize,
    /// Where the answer goes; the caller awaits the other end.
    pub reply: oneshot::Sender<Result<InferResponse>>,
    /// When the server received the request (for end-to-end statistics).
    pub received_at: Instant,
    /// When the request entered the queue (for queue-time statistics).
    pub enqueued_at: Instant,
    /// The request's tracing span, so instance-side events are attributed to it.
    pub span: tracing::Span,
}

/// The requests one instance executes together.
pub type Payload = Vec<Job>;

/// What every scheduler offers to the model handle.
pub trait Scheduler: Send + Sync {
    /// Queues `job`, or refuses it at once (full queue, stopping) with the error to return;
    /// a refused job is dropped, so nobody waits for its reply.
    fn enqueue(&self, job: Job) -> Result<()>;

    /// Stops accepting work; queued work still completes, then the workers exit.
    fn stop(&self);
}
