//! Schedulers decide which requests execute together and hand them to instance workers.
//! The contract is small (enqueue, stop), as in Triton; the choice is made at load time:
//! the dynamic batcher for models with `dynamic_batching`, otherwise the default
//! scheduler. Both feed the same [`InstancePool`].

mod default;
mod dynamic;
mod instances;
mod intake;
mod reply;

use std::time::Instant;

pub use default::{DefaultScheduler, DEFAULT_QUEUE_CAPACITY};
pub use dynamic::DynamicBatcher;
pub use instances::{InstancePool, Payload};
pub use reply::{Reply, ReplyOrder};

use crate::error::Result;
use crate::request::InferRequest;

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
}

/// What every scheduler offers to the model handle.
pub trait Scheduler: Send + Sync {
    /// Queues `job`, or refuses it at once (full queue, stopping) with the error to return;
    /// a refused job is dropped, so nobody waits for its reply.
    fn enqueue(&self, job: Job) -> Result<()>;

    /// Stops accepting work; queued work still completes, then the workers exit.
    fn stop(&self);
}
