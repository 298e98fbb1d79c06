//! The response cache: answers of earlier identical requests, served without running the
//! model. One cache per server (`--cache-config`), used by the models whose config says
//! `response_cache { enable: true }`.
//!
//! - [`store`]: the trait every store implements, and the loader trait for stores in
//!   shared libraries; [`local`] is the in-process LRU cache with a byte budget; Redis
//!   and TRITONCACHE libraries live in their own crates.
//! - [`key`]: what makes two requests identical (model, version, every input's name,
//!   datatype, shape and bytes), compared in full.
//! - [`flight`]: identical concurrent misses execute once.
//! - [`config`], [`codec`], [`stats`]: the cache's name and settings, the byte encoding
//!   for stores outside the process, and the cache-wide counters behind the `nv_cache_*`
//!   metrics.
//!
//! Only successful responses are stored, always with every output of the model, so a
//! request for any subset of the outputs can be served from the entry. Which outputs a
//! request gets, and in which format, is applied per request afterwards.

pub mod codec;
pub mod config;
pub mod flight;
pub mod key;
pub mod local;
pub mod stats;
pub mod store;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::request::OutputTensor;
pub use config::CacheConfig;
use flight::{Flights, Role};
use key::CacheKey;
use stats::CacheSnapshot;
pub use store::{CacheLoader, CacheStore};

/// Every output of one successful execution, shared between the cache and responses.
pub type CachedOutputs = Arc<Vec<OutputTensor>>;

/// The server's response cache: a [`CacheStore`] plus what holds over every store (only
/// successes stored, identical concurrent misses computed once, outcomes for statistics).
pub struct ResponseCache {
    store: Arc<dyn CacheStore>,
    flights: Arc<Flights>,
}

/// What a lookup found.
pub enum Lookup {
    /// The stored outputs, and how long finding them took.
    Hit(CachedOutputs, Duration),
    /// Nothing stored (or the store could not be reached); how long looking took.
    Miss(Duration),
}

/// How a request was answered, for the model's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// From the cache (or from an identical request computed at the same time).
    Hit {
        /// Lookup time.
        lookup: Duration,
    },
    /// Computed by the model and handed to the store, which stored it or refused it (too
    /// large, cache unreachable): Triton counts both as a miss.
    Miss {
        /// Lookup plus insertion time.
        lookup_and_insert: Duration,
    },
    /// Not computed: the model answered an error, which is never stored.
    Uncached,
}

impl ResponseCache {
    /// A response cache over `store`.
    pub fn new(store: Arc<dyn CacheStore>) -> Self {
        Self {
            store,
            flights: Arc::default(),
        }
    }

    /// Starts the store's background work (a Redis connection); call inside the runtime.
    pub fn start(&self) {
        self.store.start();
    }

    /// The cache-wide counters, for stores that keep them (the local cache; Triton's redis
    /// cache exports no metrics either).
    pub fn snapshot(&self) -> Option<CacheSnapshot> {
        self.store.snapshot()
    }

    /// What the store is, for the start-up log line.
    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// Looks `key` up in the store.
    pub async fn lookup(&self, key: &CacheKey<'_>) -> Lookup {
        let started = Instant::now();
        let found = match self.store.lookup_now(key) {
            Some(found) => found,
            None => self.store.lookup(key).await,
        };
        match found {
            Some(outputs) => Lookup::Hit(outputs, started.elapsed()),
            None => Lookup::Miss(started.elapsed()),
        }
    }

    /// The outputs for `key` after its lookup (taking `lookup`) missed: from an identical
    /// request being computed right now, or from `compute` (then stored if it succeeded).
    /// The key is a stored one ([`CacheKey::to_stored`]): the flight and the store keep it.
    pub async fn compute<F, Fut>(
        &self,
        key: CacheKey<'static>,
        lookup: Duration,
        compute: F,
    ) -> (Result<CachedOutputs>, Outcome)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<CachedOutputs>>,
    {
        let leader = match self.flights.join(&key) {
            Role::Leader(leader) => Some(leader),
            Role::Follower(waiting) => match waiting.await {
                Ok(outputs) => return (Ok(outputs), Outcome::Hit { lookup }),
                // The leader failed or went away: compute on our own.
                Err(_) => None,
            },
        };
        let result = compute().await;
        let Ok(outputs) = &result else {
            return (result, Outcome::Uncached);
        };
        let inserting = Instant::now();
        let stored = self.store.insert(&key, outputs).await;
        if let Some(leader) = leader {
            leader.finish(outputs);
        }
        let lookup_and_insert = lookup + inserting.elapsed();
        if let Err(e) = stored {
            tracing::debug!(error = %e, "response not cached");
        }
        (result, Outcome::Miss { lookup_and_insert })
    }

    /// [`Self::lookup`], then [`Self::compute`] on a miss: for a caller whose key does not
    /// borrow what `compute` consumes.
    pub async fn get_or_compute<F, Fut>(
        &self,
        key: CacheKey<'_>,
        compute: F,
    ) -> (Result<CachedOutputs>, Outcome)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<CachedOutputs>>,
    {
        match self.lookup(&key).await {
            Lookup::Hit(outputs, lookup) => (Ok(outputs), Outcome::Hit { lookup }),
            Lookup::Miss(lookup) => self.compute(key.to_stored(), lookup, compute).await,
        }
    }
}

#[cfg(test)]
mod tests;
