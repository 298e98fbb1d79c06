//! Prometheus summaries as prometheus-cpp (and so Triton) computes them: targeted
//! quantiles over a sliding time window, with a cumulative count and sum.
//!
//! Each window bucket is a CKMS stream (Cormode, Korn, Muthukrishnan, Srivastava,
//! "Effective computation of biased quantiles over data streams", ICDE 2005) for a set of
//! targeted quantiles `(φ, ε)`: the value reported for φ has a rank within `ε·n` of `φ·n`
//! among the window's `n` observations, while memory stays logarithmic in `n`. The window
//! is prometheus-cpp's `TimeWindowQuantiles`: `AGE_BUCKETS` streams, each observation goes
//! into all of them, the oldest is read and, every `MAX_AGE / AGE_BUCKETS`, cleared and
//! made the newest, so a reading covers between 48 and 60 seconds of observations.
//! Written here rather than taken from a crate: no maintained Rust crate offers
//! prometheus-cpp's windowed CKMS, and this one is small and tested for its error bound.

use std::time::{Duration, Instant};

/// How far back a summary's quantiles look (prometheus-cpp's default, Triton's choice).
pub const MAX_AGE: Duration = Duration::from_secs(60);
/// Streams the window rotates through.
pub const AGE_BUCKETS: usize = 5;
/// Observations buffered before they are merged into the stream.
const BUFFER: usize = 500;

/// A targeted quantile: `quantile` (φ) reported within `error` (ε) of its rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantile {
    /// φ, in [0, 1].
    pub quantile: f64,
    /// ε, in [0, 1].
    pub error: f64,
}

/// One CKMS sample: a value, the rank gap to its predecessor and its rank uncertainty.
#[derive(Debug, Clone, Copy)]
struct Sample {
    value: f64,
    g: u64,
    delta: u64,
}

/// A CKMS stream over all values inserted since its last reset.
#[derive(Debug, Clone)]
struct Ckms {
    targets: Vec<Quantile>,
    count: u64,
    samples: Vec<Sample>,
    buffer: Vec<f64>,
}

impl Ckms {
    fn new(targets: &[Quantile]) -> Self {
        Self {
            targets: targets.to_vec(),
            count: 0,
            samples: Vec::new(),
            buffer: Vec::with_capacity(BUFFER),
        }
    }

    /// The invariant's bound f(r, n): how much rank uncertainty a sample at rank `r` may
    /// carry so that every targeted quantile keeps its error.
    fn allowed(&self, rank: f64) -> f64 {
        let n = self.count as f64;
        self.targets
            .iter()
            .map(|t| {
                if rank >= t.quantile * n {
                    2.0 * t.error * rank / t.quantile
                } else {
                    2.0 * t.error * (n - rank) / (1.0 - t.quantile)
                }
            })
            .fold(n + 1.0, f64::min)
    }

    fn insert(&mut self, value: f64) {
        self.buffer.push(value);
        if self.buffer.len() >= BUFFER {
            self.flush();
        }
    }

    /// Merges the buffered values into the samples (one pass), then compresses.
    fn flush(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        self.buffer.sort_by(f64::total_cmp);
        let old = std::mem::take(&mut self.samples);
        let mut merged = Vec::with_capacity(old.len() + self.buffer.len());
        let mut old = old.into_iter().peekable();
        let mut rank = 0u64;
        for &value in &self.buffer {
            while let Some(s) = old.next_if(|s| s.value <= value) {
                rank += s.g;
                merged.push(s);
            }
            self.count += 1;
            // The new minimum or maximum is known exactly; elsewhere the new sample may
            // sit anywhere its neighbours' uncertainty allows.
            let delta = if merged.is_empty() || old.peek().is_none() {
                0
            } else {
                (self.allowed(rank as f64).floor() as u64).saturating_sub(1)
            };
            merged.push(Sample { value, g: 1, delta });
            rank += 1;
        }
        merged.extend(old);
        self.samples = merged;
        self.buffer.clear();
        self.compress();
    }

    /// Merges neighbours whose combined uncertainty the invariant still allows.
    fn compress(&mut self) {
        if self.samples.len() < 3 {
            return;
        }
        let mut ranks: Vec<u64> = Vec::with_capacity(self.samples.len());
        let mut rank = 0;
        for s in &self.samples {
            rank += s.g;
            ranks.push(rank);
        }
        // From the end, so that a merge leaves the ranks still to be visited unchanged;
        // the first sample (the minimum) is kept.
        let mut i = self.samples.len() - 2;
        while i >= 1 {
            let (cur, next) = (self.samples[i], self.samples[i + 1]);
            if (cur.g + next.g + next.delta) as f64 <= self.allowed(ranks[i] as f64) {
                self.samples[i + 1].g += cur.g;
                self.samples.remove(i);
            }
            i -= 1;
        }
    }

    /// The value at quantile `q`, or `None` when nothing was inserted.
    fn get(&mut self, q: f64) -> Option<f64> {
        self.flush();
        let first = self.samples.first()?;
        let wanted = q * self.count as f64;
        let bound = wanted + self.allowed(wanted) / 2.0;
        let mut rank = 0u64;
        let mut previous = first;
        for s in &self.samples[1..] {
            rank += previous.g;
            if (rank + s.g + s.delta) as f64 > bound {
                return Some(previous.value);
            }
            previous = s;
        }
        Some(previous.value)
    }

    fn reset(&mut self) {
        self.count = 0;
        self.samples.clear();
        self.buffer.clear();
    }
}

/// Quantiles over the last [`MAX_AGE`], rotated as prometheus-cpp rotates them.
#[derive(Debug, Clone)]
struct TimeWindow {
    buckets: Vec<Ckms>,
    current: usize,
    last_rotation: Instant,
}

impl TimeWindow {
    fn new(targets: &[Quantile], now: Instant) -> Self {
        Self {
            buckets: vec![Ckms::new(targets); AGE_BUCKETS],
            current: 0,
            last_rotation: now,
        }
    }

    fn rotate(&mut self, now: Instant) {
        let interval = MAX_AGE / AGE_BUCKETS as u32;
        while now.saturating_duration_since(self.last_rotation) > interval {
            self.buckets[self.current].reset();
            self.current = (self.current + 1) % self.buckets.len();
            self.last_rotation += interval;
        }
    }

    fn insert(&mut self, value: f64, now: Instant) {
        self.rotate(now);
        for bucket in &mut self.buckets {
            bucket.insert(value);
        }
    }

    fn get(&mut self, q: f64, now: Instant) -> Option<f64> {
        self.rotate(now);
        self.buckets[self.current].get(q)
    }
}

/// One summary: windowed quantiles plus the count and sum of every observation.
#[derive(Debug, Clone)]
pub struct Summary {
    targets: Vec<Quantile>,
    window: TimeWindow,
    count: u64,
    sum: f64,
}

/// A summary's reading for the exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryReading {
    /// Each targeted quantile and its value over the window (`None`: no observation).
    pub quantiles: Vec<(f64, Option<f64>)>,
    /// Observations since the summary was made.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
}

impl Summary {
    /// An empty summary for `targets`, its window starting at `now`.
    pub fn new(targets: &[Quantile], now: Instant) -> Self {
        Self {
            targets: targets.to_vec(),
            window: TimeWindow::new(targets, now),
            count: 0,
            sum: 0.0,
        }
    }

    /// Records `value` observed at `now`.
    pub fn observe(&mut self, value: f64, now: Instant) {
        self.count += 1;
        self.sum += value;
        self.window.insert(value, now);
    }

    /// The quantiles over the window ending at `now`, the count and the sum.
    pub fn read(&mut self, now: Instant) -> SummaryReading {
        let quantiles = self
            .targets
            .iter()
            .map(|t| (t.quantile, self.window.get(t.quantile, now)))
            .collect();
        SummaryReading {
            quantiles,
            count: self.count,
            sum: self.sum,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRITON: [Quantile; 5] = [
        Quantile {
            quantile: 0.5,
            error: 0.05,
        },
        Quantile {
            quantile: 0.9,
            error: 0.01,
        },
        Quantile {
            quantile: 0.95,
            error: 0.001,
        },
        Quantile {
            quantile: 0.99,
            error: 0.001,
        },
        Quantile {
            quantile: 0.999,
            error: 0.001,
        },
    ];

    /// A fixed pseudo-random permutation of 0..n (multiplicative step coprime to n).
    fn shuffled(n: u64) -> Vec<f64> {
        (0..n).map(|i| ((i * 7919 + 13) % n) as f64).collect()
    }

    #[test]
    fn quantiles_stay_within_their_rank_error() {
        for n in [1u64, 2, 3, 10, 499, 500, 501, 10_007, 100_003] {
            let mut ckms = Ckms::new(&TRITON);
            for v in shuffled(n) {
                ckms.insert(v);
            }
            for t in TRITON {
                let got = ckms.get(t.quantile).expect("values were inserted");
                // Values are 0..n, so a value is its own rank.
                let rank = got + 1.0;
                let wanted = t.quantile * n as f64;
                let slack = t.error * n as f64 + 1.0;
                assert!(
                    (rank - wanted).abs() <= slack,
                    "n={n} q={} got rank {rank}, wanted {wanted} ± {slack}",
                    t.quantile
                );
            }
            assert!(
                ckms.samples.len() as u64 <= n.min(4000),
                "compressed: {} samples for {n}",
                ckms.samples.len()
            );
        }
    }

    #[test]
    fn sorted_and_repeated_input() {
        let mut ckms = Ckms::new(&TRITON);
        for v in 0..20_000 {
            ckms.insert(f64::from(v / 100));
        }
        let median = ckms.get(0.5).expect("values were inserted");
        assert!((90.0..=110.0).contains(&median), "median {median}");
        assert_eq!(Ckms::new(&TRITON).get(0.5), None);
    }

    #[test]
    fn window_forgets_old_observations() {
        let start = Instant::now();
        let mut summary = Summary::new(&TRITON, start);
        for _ in 0..100 {
            summary.observe(1000.0, start);
        }
        let second = start + Duration::from_secs(30);
        for _ in 0..100 {
            summary.observe(10.0, second);
        }
        let reading = summary.read(second);
        assert_eq!(reading.count, 200);
        assert_eq!(reading.sum, 101_000.0);
        assert_eq!(reading.quantiles[4], (0.999, Some(1000.0)));
        // 61 s after the first batch only the second one is in the window.
        let later = summary.read(start + Duration::from_secs(61));
        assert_eq!(later.quantiles[4], (0.999, Some(10.0)));
        assert_eq!(later.count, 200, "count and sum are cumulative");
        // Two minutes after everything, the window is empty.
        let empty = summary.read(second + Duration::from_secs(120));
        assert!(empty.quantiles.iter().all(|(_, v)| v.is_none()));
    }
}
