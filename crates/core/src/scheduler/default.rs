//! The default scheduler: every request executes alone, on the first free instance.

use std::sync::Arc;

use crossbeam_channel::{Sender, TrySendError};

use super::intake::Intake;
use super::{InstancePool, Job, Payload, Scheduler};
use crate::error::{Error, Result};

/// Hands each request to the instance pool as a payload of one.
pub struct DefaultScheduler {
    // Closing it lets the workers drain the channel and exit.
    intake: Intake<Sender<Payload>>,
    pool: Arc<InstancePool>,
}

/// Requests that may wait for a free instance before new ones are refused. Triton's default
/// scheduler queue is unbounded; ours is bounded so that overload answers at once.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4096;

impl DefaultScheduler {
    /// A scheduler feeding `pool` through `sender`.
    pub fn new(sender: Sender<Payload>, pool: Arc<InstancePool>) -> Self {
        Self {
            intake: Intake::new(sender),
            pool,
        }
    }
}

impl Scheduler for DefaultScheduler {
    fn enqueue(&self, job: Job) -> Result<()> {
        self.intake.send_with(|sender| {
            sender.try_send(Payload::single(job)).map_err(|e| match e {
                TrySendError::Full(_) => Error::unavailable("Exceeds maximum queue size"),
                TrySendError::Disconnected(_) => Error::unavailable("model instances have stopped"),
            })
        })
    }

    fn stop(&self) {
        self.intake.close();
        self.pool.join();
    }
}
