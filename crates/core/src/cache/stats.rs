//! Cache-wide counters, exported as Triton's `nv_cache_*` metrics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Counters shared by a cache and the metrics endpoint.
#[derive(Debug, Default)]
pub struct CacheCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    lookup_us: AtomicU64,
    insertion_us: AtomicU64,
    entries: AtomicU64,
    used_bytes: AtomicU64,
}

/// A reading of [`CacheCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheSnapshot {
    /// Lookups that found an entry.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
    /// Total lookup time, µs.
    pub lookup_us: u64,
    /// Total insertion time, µs.
    pub insertion_us: u64,
    /// Entries held now (local cache only).
    pub entries: u64,
    /// Share of the byte budget in use, 0..1 (local cache only).
    pub utilization: f64,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl CacheCounters {
    /// Records one lookup.
    pub fn lookup(&self, hit: bool, took: Duration) {
        if hit { &self.hits } else { &self.misses }.fetch_add(1, Relaxed);
        self.lookup_us.fetch_add(micros(took), Relaxed);
    }

    /// Records one insertion and the evictions it caused.
    pub fn inserted(&self, evicted: u64, took: Duration) {
        self.evictions.fetch_add(evicted, Relaxed);
        self.insertion_us.fetch_add(micros(took), Relaxed);
    }

    /// Records how full the cache is.
    pub fn occupancy(&self, entries: u64, used_bytes: u64) {
        self.entries.store(entries, Relaxed);
        self.used_bytes.store(used_bytes, Relaxed);
    }

    /// Reads every counter; `size` is the byte budget (0 when unbounded or unknown).
    pub fn snapshot(&self, size: usize) -> CacheSnapshot {
        let used = self.used_bytes.load(Relaxed);
        CacheSnapshot {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            lookup_us: self.lookup_us.load(Relaxed),
            insertion_us: self.insertion_us.load(Relaxed),
            entries: self.entries.load(Relaxed),
            utilization: if size == 0 {
                0.0
            } else {
                used as f64 / size as f64
            },
        }
    }
}
