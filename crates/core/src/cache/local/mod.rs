//! The in-process cache (`--cache-config local,size=N`): entries in a hash index whose
//! buckets hold full keys, least-recently-used eviction, and a byte budget that entries
//! plus their bookkeeping never exceed.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use futures::future::BoxFuture;

use super::config::CacheConfig;
use super::key::CacheKey;
use super::stats::{CacheCounters, CacheSnapshot};
use super::store::CacheStore;
use super::CachedOutputs;
use crate::error::{Error, Result};

/// Bookkeeping charged to every entry on top of its key and outputs.
const ENTRY_OVERHEAD: usize = 128;

/// The smallest budget Triton's local cache starts with: its buffer manager needs 192
/// bytes for itself (measured on 2.51: `size=191` fails to start, `size=192` starts and
/// then stores nothing, which L0_response_cache relies on with `size=200`).
pub const MIN_SIZE: usize = 192;

/// Computes the bucket of a key; replaceable in tests to force collisions.
pub type KeyHasher = fn(&CacheKey<'_>) -> u64;

struct Entry {
    key: CacheKey<'static>,
    outputs: CachedOutputs,
    bucket: u64,
    last_used: u64,
    cost: usize,
}

/// Spreads the maps' keys with one multiply from a seed drawn per cache: the keys are
/// already a 64-bit hash (buckets) or a counter (entry ids), so SipHash on them cost more
/// than the rest of a hit's lookup; the seed keeps a client from choosing keys that pile
/// into one slot.
#[derive(Clone)]
struct Spread(u64);

impl Default for Spread {
    fn default() -> Self {
        Self(RandomState::new().hash_one(0x6e65_7265_6964_u64))
    }
}

impl BuildHasher for Spread {
    type Hasher = Spreader;

    fn build_hasher(&self) -> Spreader {
        Spreader(self.0)
    }
}

/// The hasher [`Spread`] builds: multiply and fold, so the table's high bits (its tag)
/// and low bits (its slot) both depend on every bit of the key.
struct Spreader(u64);

impl Hasher for Spreader {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

#[derive(Default)]
struct State {
    buckets: HashMap<u64, Vec<u64>, Spread>,
    entries: HashMap<u64, Entry, Spread>,
    /// Recency order: last-use tick → entry id.
    recency: BTreeMap<u64, u64>,
    used: usize,
    tick: u64,
    next_id: u64,
}

impl State {
    /// Marks entry `id` the most recently used; returns it.
    fn touch(&mut self, id: u64) -> Option<&Entry> {
        let entry = self.entries.get_mut(&id)?;
        // The most recent entry stays where it is: a hot key's hits move nothing.
        if entry.last_used != self.tick {
            self.recency.remove(&entry.last_used);
            self.tick += 1;
            entry.last_used = self.tick;
            self.recency.insert(self.tick, id);
        }
        Some(entry)
    }

    fn find(&self, bucket: u64, key: &CacheKey) -> Option<u64> {
        self.buckets
            .get(&bucket)?
            .iter()
            .copied()
            .find(|id| self.entries.get(id).is_some_and(|e| &e.key == key))
    }

    fn remove(&mut self, id: u64) {
        let Some(entry) = self.entries.remove(&id) else {
            return;
        };
        self.recency.remove(&entry.last_used);
        self.used -= entry.cost;
        if let Some(ids) = self.buckets.get_mut(&entry.bucket) {
            ids.retain(|other| *other != id);
            if ids.is_empty() {
                self.buckets.remove(&entry.bucket);
            }
        }
    }
}

/// The local cache.
pub struct LocalCache {
    size: usize,
    hasher: KeyHasher,
    state: Mutex<State>,
    counters: CacheCounters,
}

/// The settings Triton's local cache reads.
const KEYS: &[&str] = &["size"];

impl LocalCache {
    /// A cache of `size` bytes.
    pub fn new(size: usize) -> Result<Self> {
        Self::with_hasher(size, |key| key.hash64())
    }

    /// [`Self::from_config`] as a shared store, the shape the wiring crate's store
    /// choice takes.
    pub fn open(config: &CacheConfig) -> Result<Arc<dyn CacheStore>> {
        Ok(Arc::new(Self::from_config(config)?))
    }

    /// The cache `--cache-config local,size=N` asks for, with Triton's message when the
    /// size is missing or not a number.
    pub fn from_config(config: &CacheConfig) -> Result<Self> {
        config.warn_unknown(KEYS);
        let size = config
            .number::<usize>("size", "LocalCache")
            .ok()
            .flatten()
            .ok_or_else(|| {
                Error::invalid_arg(
                    "Failed to initialize LocalCache: config didn't contain a valid 'size' field.",
                )
            })?;
        Self::new(size)
    }

    /// A cache whose buckets come from `hasher` (tests force collisions with it).
    pub fn with_hasher(size: usize, hasher: KeyHasher) -> Result<Self> {
        if size < MIN_SIZE {
            return Err(Error::invalid_arg(format!(
                "Failed to initialize LocalCache: size {size} is too small; it must be at least {MIN_SIZE} bytes"
            )));
        }
        Ok(Self {
            size,
            hasher,
            state: Mutex::new(State::default()),
            counters: CacheCounters::default(),
        })
    }

    /// The outputs stored under `key`, refreshing its recency.
    pub fn lookup(&self, key: &CacheKey) -> Option<CachedOutputs> {
        let started = Instant::now();
        let bucket = (self.hasher)(key);
        let found = {
            let mut state = self.state.lock();
            let id = state.find(bucket, key);
            id.and_then(|id| state.touch(id).map(|e| e.outputs.clone()))
        };
        self.counters.lookup(found.is_some(), started.elapsed());
        found
    }

    /// Stores `outputs` under `key`, evicting least-recently-used entries to make room.
    /// An entry larger than the whole cache is not stored.
    pub fn insert(&self, key: &CacheKey, outputs: CachedOutputs) -> Result<()> {
        let started = Instant::now();
        let cost = ENTRY_OVERHEAD
            + key.stored_size()
            + outputs
                .iter()
                .map(|o| o.name.len() + 8 * o.shape.len() + o.data.len() + 48)
                .sum::<usize>();
        if cost > self.size {
            return Err(Error::internal(format!(
                "Requested byte_size: {cost} is greater than total cache size: {}",
                self.size
            )));
        }
        let bucket = (self.hasher)(key);
        let stored = key.to_stored();
        let mut evicted = 0;
        {
            let mut state = self.state.lock();
            if let Some(id) = state.find(bucket, key) {
                // Another request stored the same answer first; keep it.
                state.touch(id);
                return Ok(());
            }
            while state.used + cost > self.size {
                let Some((_, &oldest)) = state.recency.iter().next() else {
                    break;
                };
                state.remove(oldest);
                evicted += 1;
            }
            state.next_id += 1;
            state.tick += 1;
            let (id, tick) = (state.next_id, state.tick);
            state.used += cost;
            state.buckets.entry(bucket).or_default().push(id);
            state.recency.insert(tick, id);
            state.entries.insert(
                id,
                Entry {
                    key: stored,
                    outputs,
                    bucket,
                    last_used: tick,
                    cost,
                },
            );
            self.counters
                .occupancy(state.entries.len() as u64, state.used as u64);
        }
        self.counters.inserted(evicted, started.elapsed());
        Ok(())
    }

    /// The byte budget.
    pub fn size(&self) -> usize {
        self.size
    }
}

impl CacheStore for LocalCache {
    fn lookup<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Option<CachedOutputs>> {
        Box::pin(std::future::ready(LocalCache::lookup(self, key)))
    }

    fn lookup_now(&self, key: &CacheKey) -> Option<Option<CachedOutputs>> {
        Some(LocalCache::lookup(self, key))
    }

    fn insert<'a>(
        &'a self,
        key: &'a CacheKey,
        outputs: &'a CachedOutputs,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(std::future::ready(LocalCache::insert(
            self,
            key,
            outputs.clone(),
        )))
    }

    fn snapshot(&self) -> Option<CacheSnapshot> {
        Some(self.counters.snapshot(self.size))
    }

    fn describe(&self) -> String {
        format!("local, {} bytes", self.size)
    }
}

#[cfg(test)]
mod tests;
