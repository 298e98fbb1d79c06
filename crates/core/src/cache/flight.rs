//! Single-flight: identical requests that miss the cache at the same moment execute once.
//! The first becomes the leader and runs the model; the others wait for its outputs. If
//! the leader fails (errors are never shared or cached) or goes away, the waiters run the
//! model themselves.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::key::CacheKey;
use super::CachedOutputs;

type Waiters = Vec<oneshot::Sender<CachedOutputs>>;

/// Requests being computed, by key.
#[derive(Default)]
pub struct Flights {
    // Buckets by the key's hash; the full key is compared inside a bucket.
    running: Mutex<HashMap<u64, Vec<(CacheKey<'static>, Waiters)>>>,
}

/// What [`Flights::join`] makes of a request.
pub enum Role {
    /// Compute, then call [`Leader::finish`].
    Leader(Leader),
    /// Wait for the leader's outputs; an error means "compute it yourself".
    Follower(oneshot::Receiver<CachedOutputs>),
}

impl Flights {
    /// Joins the flight for `key` (a stored key: the flight keeps it), or starts one.
    pub fn join(self: &Arc<Self>, key: &CacheKey<'static>) -> Role {
        let mut running = self.running.lock();
        let bucket = running.entry(key.hash64()).or_default();
        if let Some((_, waiters)) = bucket.iter_mut().find(|(k, _)| k == key) {
            let (sender, receiver) = oneshot::channel();
            waiters.push(sender);
            return Role::Follower(receiver);
        }
        bucket.push((key.clone(), Vec::new()));
        Role::Leader(Leader {
            flights: self.clone(),
            key: key.clone(),
        })
    }

    fn end(&self, key: &CacheKey) -> Waiters {
        let mut running = self.running.lock();
        let Some(bucket) = running.get_mut(&key.hash64()) else {
            return Vec::new();
        };
        let waiters = bucket
            .iter()
            .position(|(k, _)| k == key)
            .map(|i| bucket.swap_remove(i).1)
            .unwrap_or_default();
        if bucket.is_empty() {
            running.remove(&key.hash64());
        }
        waiters
    }
}

/// The request computing a key; dropping it without [`Leader::finish`] releases the
/// waiters to compute on their own.
pub struct Leader {
    flights: Arc<Flights>,
    key: CacheKey<'static>,
}

impl Leader {
    /// Hands `outputs` to every waiter.
    pub fn finish(self, outputs: &CachedOutputs) {
        for waiter in self.flights.end(&self.key) {
            let _ = waiter.send(outputs.clone());
        }
        // `Drop` finds the flight already ended.
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        // Dropping the senders tells the waiters to compute themselves.
        drop(self.flights.end(&self.key));
    }
}
