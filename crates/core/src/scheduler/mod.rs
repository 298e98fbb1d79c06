//! Schedulers decide which requests execute together and hand them to instance workers.
//! The contract is small (enqueue, stop), as in Triton; the choice is made at load time:
//! the dynamic batcher for models with `dynamic_batching`, the sequence batcher for
//! `sequence_batching`, otherwise the default scheduler. All feed [`InstancePool`]s.

#[cfg(test)]
mod decoupled_tests;
mod default;
mod dynamic;
pub mod hold;
mod instance_set;
mod instances;
mod intake;
mod job;
mod reply;
pub mod sequence;
mod waiting_batch;
mod warmup;

pub use default::{DefaultScheduler, DEFAULT_QUEUE_CAPACITY};
pub use dynamic::strategy::{
    strategy_library, BatchCut, BatchStrategy, BatchStrategyLoader, STRATEGY_PATH_PARAMETER,
};
pub use dynamic::DynamicBatcher;
pub use instance_set::{
    create_passive, InstanceHost, InstanceSet, InstanceSource, PassiveInstances,
};
pub use instances::{Instance, InstancePool, Payload, WorkerId};
pub use job::{IterationCallback, IterationHook, Job, OutputCallback, OutputHook};
pub use reply::{Reply, ReplyOrder};
pub use sequence::SequenceBatcher;
pub use warmup::WarmupSample;

use std::time::Instant;

use crate::error::Result;

/// The schedulers' clock for deadlines. It is tokio's, so that tests under paused time
/// move it; outside them it reads the system's monotonic clock like `Instant::now`.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
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

/// A scheduler shared with what changes its instances (the sequence batcher is also its
/// instance set's [`InstanceHost`]).
impl<S: Scheduler + ?Sized> Scheduler for std::sync::Arc<S> {
    fn enqueue(&self, job: Job) -> Result<()> {
        (**self).enqueue(job)
    }

    fn stop(&self) {
        (**self).stop()
    }
}
