//! The response cache: answers of earlier identical requests, served without running the
//! model. One cache per server (`--cache-config`), used by the models whose config says
//! `response_cache { enable: true }`.
//!
//! - [`key`]: what makes two requests identical (model, version, every input's name,
//!   datatype, shape and bytes), compared in full.
//! - [`local`]: the in-process LRU cache with a byte budget.
//! - [`redis`]: a Redis server shared by several processes.
//! - [`flight`]: identical concurrent misses execute once.
//! - [`settings`], [`codec`], [`stats`]: configuration, the wire encoding for Redis, and
//!   the cache-wide counters behind the `nv_cache_*` metrics.
//!
//! Only successful responses are stored, always with every output of the model, so a
//! request for any subset of the outputs can be served from the entry. Which outputs a
//! request gets, and in which format, is applied per request afterwards.

pub mod codec;
pub mod flight;
pub mod key;
pub mod local;
pub mod redis;
pub mod settings;
pub mod stats;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::request::OutputTensor;
use flight::{Flights, Role};
use key::CacheKey;
use local::LocalCache;
use redis::RedisCache;
pub use settings::{CacheSettings, RedisSettings};
use stats::{CacheCounters, CacheSnapshot};

/// Every output of one successful execution, shared between the cache and responses.
pub type CachedOutputs = Arc<Vec<OutputTensor>>;

enum Store {
    Local(LocalCache),
    Redis(RedisCache),
}

/// The server's response cache.
pub struct ResponseCache {
    store: Store,
    counters: Arc<CacheCounters>,
    flights: Arc<Flights>,
}

/// How a request was answered, for the model's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// From the cache (or from an identical request computed at the same time).
    Hit {
        /// Lookup time.
        lookup: Duration,
    },
    /// Computed by the model and stored.
    Miss {
        /// Lookup plus insertion time.
        lookup_and_insert: Duration,
    },
    /// Computed by the model but not stored (too large, cache unreachable, or an error).
    Uncached,
}

impl ResponseCache {
    /// Creates the cache `settings` describe. A Redis cache connects in the background.
    pub fn new(settings: CacheSettings) -> Result<Self> {
        let counters = Arc::new(CacheCounters::default());
        let store = match settings {
            CacheSettings::Local { size } => Store::Local(LocalCache::new(size, counters.clone())?),
            CacheSettings::Redis(redis) => Store::Redis(RedisCache::new(redis, counters.clone())?),
        };
        Ok(Self {
            store,
            counters,
            flights: Arc::default(),
        })
    }

    /// Starts background work (the Redis connection); call inside the runtime.
    pub fn start(&self) {
        if let Store::Redis(redis) = &self.store {
            redis.connect_in_background();
        }
    }

    /// The cache-wide counters, for the local cache (the redis cache exports no metrics,
    /// as in Triton).
    pub fn snapshot(&self) -> Option<CacheSnapshot> {
        match &self.store {
            Store::Local(local) => Some(self.counters.snapshot(local.size())),
            Store::Redis(_) => None,
        }
    }

    async fn lookup(&self, key: &CacheKey) -> Option<CachedOutputs> {
        match &self.store {
            Store::Local(local) => local.lookup(key),
            Store::Redis(redis) => redis.lookup(key).await,
        }
    }

    async fn insert(&self, key: &CacheKey, outputs: &CachedOutputs) -> Result<()> {
        match &self.store {
            Store::Local(local) => local.insert(key, outputs.clone()),
            Store::Redis(redis) => redis.insert(key, outputs).await,
        }
    }

    /// The outputs for `key`: from the cache, from an identical request being computed
    /// right now, or from `compute` (then stored if it succeeded).
    pub async fn get_or_compute<F, Fut>(
        &self,
        key: CacheKey,
        compute: F,
    ) -> (Result<CachedOutputs>, Outcome)
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<CachedOutputs>>,
    {
        let started = Instant::now();
        if let Some(outputs) = self.lookup(&key).await {
            let lookup = started.elapsed();
            return (Ok(outputs), Outcome::Hit { lookup });
        }
        let lookup = started.elapsed();
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
        let stored = self.insert(&key, outputs).await;
        if let Some(leader) = leader {
            leader.finish(outputs);
        }
        match stored {
            Ok(()) => {
                let lookup_and_insert = lookup + inserting.elapsed();
                (result, Outcome::Miss { lookup_and_insert })
            }
            Err(e) => {
                tracing::debug!(error = %e, "response not cached");
                (result, Outcome::Uncached)
            }
        }
    }
}

#[cfg(test)]
mod tests;
