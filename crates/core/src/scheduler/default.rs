//! The default scheduler: every request executes alone, on the first free instance.

use crossbeam_channel::{Sender, TrySendError};
use parking_lot::RwLock;

use super::{InstancePool, Job, Payload, Scheduler};
use crate::error::{Error, Result};

/// Hands each request to the instance pool as a payload of one.
pub struct DefaultScheduler {
    // `None` once stopped; dropping the sender lets the workers drain and exit. The lock
    // is read on every enqueue and written once, at stop.
    sender: RwLock<Option<Sender<Payload>>>,
    pool: InstancePool,
}

/// Requests that may wait for a free instance before new ones are refused. Triton's default
/// scheduler queue is unbounded; ours is bounded so that overload answers at once.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4096;

impl DefaultScheduler {
    /// A scheduler feeding `pool` through `sender`.
    pub fn new(sender: Sender<Payload>, pool: InstancePool) -> Self {
        Self {
            sender: RwLock::new(Some(sender)),
            pool,
        }
    }
}

impl Scheduler for DefaultScheduler {
    fn enqueue(&self, job: Job) -> Result<()> {
        let guard = self.sender.read();
        let Some(sender) = guard.as_ref() else {
            return Err(Error::unavailable(
                "Server is stopping, scheduler for model has stopped accepting new inference requests",
            ));
        };
        sender.try_send(Payload::single(job)).map_err(|e| match e {
            TrySendError::Full(_) => Error::unavailable("Exceeds maximum queue size"),
            TrySendError::Disconnected(_) => Error::unavailable("model instances have stopped"),
        })
    }

    fn stop(&self) {
        self.sender.write().take();
        self.pool.join();
    }
}
