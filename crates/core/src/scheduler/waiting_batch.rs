//! A batch the dynamic batcher has handed to a rate-limited model's instances that no
//! instance has started yet. Until one starts it (when its rate-limiter turn comes), the
//! batcher keeps adding queued requests to it, as Triton's payload keeps growing until
//! the rate limiter gives it an instance; so requests that arrive while the instances
//! wait for their turns still join full batches instead of queueing behind small ones.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::Job;

/// The jobs added to a handed-over batch since it was cut, shared by the batcher (which
/// adds) and the worker (which starts it).
#[derive(Debug, Default)]
pub struct WaitingBatch {
    /// The jobs added so far; `None` once an instance has started the batch.
    added: Mutex<Option<Vec<Job>>>,
    started: Notify,
}

impl WaitingBatch {
    /// A batch that has just been cut and handed over.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            added: Mutex::new(Some(Vec::new())),
            started: Notify::new(),
        })
    }

    /// Runs `grow` on the jobs added so far, while no instance has started the batch
    /// (the batch cannot start meanwhile); `None`, without running it, once one has.
    pub fn while_waiting<T>(&self, grow: impl FnOnce(&mut Vec<Job>) -> T) -> Option<T> {
        self.added.lock().as_mut().map(grow)
    }

    /// Starts the batch: the jobs added since it was cut; it takes no more afterwards.
    pub fn start(&self) -> Vec<Job> {
        let added = self.added.lock().take().unwrap_or_default();
        self.started.notify_one();
        added
    }

    /// Resolves once an instance has started the batch.
    pub async fn started(&self) {
        self.started.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_join_until_an_instance_starts_the_batch() {
        let batch = WaitingBatch::new();
        assert_eq!(batch.while_waiting(|added| added.len()), Some(0));
        assert!(batch.start().is_empty());
        // Started: nothing joins any more, and the batcher waiting for that wakes.
        assert_eq!(batch.while_waiting(|added| added.len()), None);
        batch.started().await;
    }
}
