//! A small mutation fuzzer that runs as ordinary `#[test]`s on stable Rust: a seeded
//! random source, byte-level mutations of valid seed inputs (bit flips, splices,
//! truncation, duplicated ranges, hostile numbers and tokens), a loop that says which
//! iteration failed, and an allocator that records the largest single allocation so a
//! hostile length that makes a decoder reserve gigabytes fails the test instead of
//! passing silently.
//!
//! Iteration counts: each target passes a short default (a few seconds in release
//! mode); `NEREID_FUZZ_ITERATIONS` overrides it for a long run and `NEREID_FUZZ_SEED`
//! picks another seed. Environment reads are fine here: this is test support, never
//! built into the server.
//!
//! The allocator lives in `nereid-alloc-track` (`GlobalAlloc` is an unsafe trait, and the
//! core forbids `unsafe`); it is re-exported here.

use std::any::Any;
use std::fmt::Debug;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use super::{write_model, TestBackend};
use crate::server::Server;

/// Environment variable with the number of iterations of every fuzz target.
pub const ITERATIONS_VAR: &str = "NEREID_FUZZ_ITERATIONS";

/// Environment variable with the base seed (decimal); targets derive theirs from it.
pub const SEED_VAR: &str = "NEREID_FUZZ_SEED";

/// Environment variable naming one iteration to run alone, its input printed first: how
/// to see the input of an iteration that aborted the process.
pub const ONLY_VAR: &str = "NEREID_FUZZ_ONLY";

/// The base seed when [`SEED_VAR`] is unset, so the short run in the test command is the
/// same on every machine.
const DEFAULT_SEED: u64 = 0x6e65_7265_6964_2131;

pub use nereid_alloc_track::{
    largest_allocation, reset_largest_allocation, TrackingAllocator, ALLOCATION_LIMIT,
};

/// The models the frontend targets fuzz against, as `(name, config.pbtxt)`: `batched`
/// batches FP32 `INPUT0` and BYTES `INPUT1`; `plain` does not batch and
/// takes INT32 `[2, -1]` and UINT8 `[-1]`. Served by [`echo_server`], both echo `INPUTk`
/// as `OUTPUTk`, so a valid request's answer must equal what it sent. (No input is
/// optional: the echo backend answers an absent input with no output, which fails a
/// request naming that output with an internal error, a property of the test double.)
pub const ECHO_MODELS: &[(&str, &str)] = &[
    (
        "batched",
        r#"backend: "identity" max_batch_size: 8
           input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
                   { name: "INPUT1" data_type: TYPE_STRING dims: [ -1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
                    { name: "OUTPUT1" data_type: TYPE_STRING dims: [ -1 ] } ]"#,
    ),
    (
        "plain",
        r#"backend: "identity" max_batch_size: 0
           input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2, -1 ] },
                   { name: "INPUT1" data_type: TYPE_UINT8 dims: [ -1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2, -1 ] },
                    { name: "OUTPUT1" data_type: TYPE_UINT8 dims: [ -1 ] } ]"#,
    ),
];

/// A server whose repository `root` holds [`ECHO_MODELS`], all loaded, on the current
/// tokio runtime.
pub async fn echo_server(root: &Path) -> Arc<Server> {
    for (name, config) in ECHO_MODELS {
        write_model(root, name, config, &[1]);
    }
    let backend = TestBackend::echo(&[("INPUT0", "OUTPUT0"), ("INPUT1", "OUTPUT1")]);
    super::server(root, &backend).await
}

/// A splitmix64 random source: tiny, fast, and the same stream for the same seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One of `items`, which must not be empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// A number that often sits on a boundary: 0, ±1, powers of two around the integer
    /// widths, the extremes, or a small random value.
    pub fn hostile_i64(&mut self) -> i64 {
        match self.below(8) {
            0 => *self.pick(&[0, 1, -1, 2, 4, 8]),
            1 => *self.pick(&[i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1]),
            2 => *self.pick(&[
                i64::from(u8::MAX) + 1,
                i64::from(u16::MAX) + 1,
                i64::from(u32::MAX),
                i64::from(u32::MAX) + 1,
                i64::from(i32::MAX),
                i64::from(i32::MIN),
            ]),
            3 => 1i64 << self.below(63),
            4 => -(1i64 << self.below(63)),
            _ => self.below(17) as i64 - 4,
        }
    }
}

/// Numbers and tokens that every text target gets spliced in: boundaries of the integer
/// widths, JSON and text-format punctuation.
pub const HOSTILE_TOKENS: &[&str] = &[
    "0",
    "-1",
    "-0",
    "1e308",
    "-1e400",
    "NaN",
    "255",
    "256",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "0.5",
    "\"\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "[]",
    "{}",
    "null",
    "true",
    ",",
    ":",
    "[",
    "]",
    "{",
    "}",
    "\"",
    "\\",
    "#",
    "\n",
];

/// Applies one to four random mutations to `data`: bit flips, random or hostile bytes,
/// inserted and deleted ranges, a range duplicated elsewhere, truncation, a chunk of
/// another seed spliced in, a token from `tokens` inserted, or a run of ASCII digits
/// replaced by a hostile number. The result stays under `max_len` bytes.
pub fn mutate(
    rng: &mut Rng,
    data: &mut Vec<u8>,
    others: &[&[u8]],
    tokens: &[&str],
    max_len: usize,
) {
    for _ in 0..=rng.below(4) {
        mutate_once(rng, data, others, tokens);
    }
    data.truncate(max_len);
}

fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, others: &[&[u8]], tokens: &[&str]) {
    let len = data.len();
    let at = rng.below(len + 1);
    match rng.below(10) {
        0 if len > 0 => data[at.min(len - 1)] ^= 1 << rng.below(8),
        1 if len > 0 => {
            data[at.min(len - 1)] = *rng.pick(&[0u8, 0xff, 0x80, 0x7f, b'"', b'\\', b'9', b' ']);
        }
        2 => {
            let count = 1 + rng.below(8);
            let inserted = rng.bytes(count);
            data.splice(at..at, inserted);
        }
        3 => {
            let end = (at + 1 + rng.below(16)).min(len);
            data.drain(at.min(end)..end);
        }
        4 => {
            let end = (at + 1 + rng.below(64)).min(len);
            let chunk = data[at.min(end)..end].to_vec();
            let to = rng.below(len + 1);
            data.splice(to..to, chunk);
        }
        5 => data.truncate(at),
        6 if !others.is_empty() => {
            let other = *rng.pick(others);
            let from = rng.below(other.len() + 1);
            let end = (from + 1 + rng.below(128)).min(other.len());
            data.splice(at..at, other[from.min(end)..end].iter().copied());
        }
        7 if !tokens.is_empty() => {
            let token = rng.pick(tokens).as_bytes();
            data.splice(at..at, token.iter().copied());
        }
        8 => replace_number(rng, data),
        _ => {
            let token = rng.pick(HOSTILE_TOKENS).as_bytes();
            data.splice(at..at, token.iter().copied());
        }
    }
}

/// Replaces the run of ASCII digits at or after a random position with a hostile number.
fn replace_number(rng: &mut Rng, data: &mut Vec<u8>) {
    let start_at = rng.below(data.len() + 1);
    let Some(start) = data[start_at..].iter().position(u8::is_ascii_digit) else {
        return;
    };
    let start = start_at + start;
    let end = data[start..]
        .iter()
        .position(|b| !b.is_ascii_digit())
        .map_or(data.len(), |n| start + n);
    let number = rng.hostile_i64().to_string().into_bytes();
    data.splice(start..end, number);
}

/// The number of iterations: [`ITERATIONS_VAR`] when set, else `default`.
pub fn iterations(default: u64) -> u64 {
    env_number(ITERATIONS_VAR).unwrap_or(default)
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs a fuzz target: for each iteration, `generate` makes an input from a random source
/// seeded by the base seed, the target's name and the iteration, and `check` tests it
/// (with the same source, for choices the check makes). A failing iteration prints the
/// seed, the iteration and the input; one that aborts the process (an allocation the
/// system refuses) prints the iteration from the allocator, and [`ONLY_VAR`] then runs
/// that iteration alone, printing its input first. Each iteration's largest single
/// allocation on this thread must stay under [`ALLOCATION_LIMIT`]. Returns the number of
/// iterations run.
pub fn run<I: Debug>(
    target: &str,
    default_iterations: u64,
    mut generate: impl FnMut(&mut Rng) -> I,
    mut check: impl FnMut(&I, &mut Rng),
) -> u64 {
    let base = env_number(SEED_VAR).unwrap_or(DEFAULT_SEED);
    let target_seed = target.bytes().fold(base, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let only = env_number(ONLY_VAR);
    let range = match only {
        Some(i) => i..i.saturating_add(1),
        None => 0..iterations(default_iterations),
    };
    let count = range.end - range.start;
    for iteration in range {
        let mut rng = Rng::new(target_seed ^ iteration.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        nereid_alloc_track::set_iteration(Some(iteration));
        reset_largest_allocation();
        let input = generate(&mut rng);
        if only.is_some() {
            eprintln!("fuzz target {target}: iteration {iteration}: {input:#?}");
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input, &mut rng)));
        let largest = largest_allocation();
        nereid_alloc_track::set_iteration(None);
        let failure = match outcome {
            Err(panic) => Some(panic),
            Ok(()) if largest > ALLOCATION_LIMIT => Some(Box::new(format!(
                "the largest single allocation was {largest} bytes"
            )) as Box<dyn Any + Send>),
            Ok(()) => None,
        };
        if let Some(panic) = failure {
            let shown = format!("{input:?}");
            let shown = shown.get(..8192).unwrap_or(&shown);
            eprintln!(
                "fuzz target {target}: iteration {iteration} failed ({SEED_VAR}={base} {ONLY_VAR}={iteration}) on input {shown}"
            );
            resume_unwind(panic);
        }
    }
    eprintln!("fuzz target {target}: {count} iterations, 0 failures ({SEED_VAR}={base})");
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_mutations() {
        let seed: &[u8] = br#"{"a":[1,2,3]}"#;
        let mutated = |s| {
            let mut rng = Rng::new(s);
            let mut data = seed.to_vec();
            mutate(&mut rng, &mut data, &[seed], &[], 1024);
            data
        };
        assert_eq!(mutated(7), mutated(7));
        assert!(
            (0..32).any(|s| mutated(s) != seed),
            "mutations change the input"
        );
    }

    #[test]
    fn mutations_respect_the_length_limit() {
        let mut rng = Rng::new(1);
        let mut data = vec![b'7'; 100];
        for _ in 0..1000 {
            mutate(&mut rng, &mut data, &[], &["xxxxxxxx"], 120);
            assert!(data.len() <= 120);
        }
    }
}
