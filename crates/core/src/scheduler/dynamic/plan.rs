//! Deciding what to execute: how many queued jobs (in service order) form the next batch,
//! or how long to wait for a fuller one. Pure, so it is tested without any runtime.

use std::time::Instant;

use super::queue::PriorityQueues;
use super::strategy::BatchStrategy;
use crate::model::{DynamicBatchingSpec, ModelSpec};
use crate::request::InputTensor;
use crate::scheduler::Job;

/// The batcher's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Execute the first `n` jobs now.
    Execute(usize),
    /// Wait (for more requests) until this moment at the latest.
    WaitUntil(Instant),
}

/// Whether `job` may share a batch whose first request has the inputs `first`: the same
/// inputs (requests leaving out different optional inputs never batch together, as in
/// Triton), with the same shapes for every input that does not allow ragged batches (the
/// batch dimension aside).
fn compatible(spec: &ModelSpec, first: &[InputTensor], job: &Job) -> bool {
    if first.len() != job.request.inputs.len() {
        return false;
    }
    first.iter().all(|a| {
        if spec.input(&a.name).is_some_and(|t| t.allow_ragged_batch) {
            return true;
        }
        job.request
            .inputs
            .iter()
            .find(|b| b.name == a.name)
            .is_some_and(|b| b.shape.get(1..) == a.shape.get(1..))
    })
}

/// Plans the next batch from `queues` at `now`, by Triton's rules: walking the queue in
/// service order (up to `max_batch_size` and while shapes agree), the "best" cut is the
/// longest prefix whose size is a preferred batch size, or, when none is, the prefix just
/// before the batch would outgrow the largest preferred size. The best cut runs at once
/// while the oldest request is within `max_queue_delay`; past it, or when the batch
/// cannot grow further, everything walked runs; otherwise the batcher waits. A custom
/// `strategy` is asked about each request the walk reaches, and one it refuses ends the
/// batch there as if it could not grow, as in Triton; the first request always runs,
/// so a request no batch can take runs alone where Triton's batcher would spin on it.
pub fn plan_batch(
    settings: &DynamicBatchingSpec,
    spec: &ModelSpec,
    queues: &PriorityQueues,
    strategy: Option<&dyn BatchStrategy>,
    now: Instant,
) -> Plan {
    let max_batch_size = spec.max_batch_size.max(1);
    let preferred = &settings.preferred_batch_sizes;
    let max_preferred = preferred.last().copied().unwrap_or(0);
    let mut jobs = queues.iter();
    let Some(first) = jobs.next() else {
        return Plan::WaitUntil(now + settings.max_queue_delay);
    };
    let mut cut = strategy.map(BatchStrategy::start_batch);
    if let Some(cut) = &mut cut {
        // Asked so that its running totals count the first request; it runs regardless.
        cut.include(&first.request);
    }
    // Prefix sizes: sizes[i] = batch size of the first i + 1 jobs.
    let mut sizes = vec![first.batch_size];
    let mut best = preferred.contains(&first.batch_size).then_some(0);
    let mut oldest = first.enqueued_at;
    // Whether the walk stopped because the batch cannot take the next request.
    let mut cannot_grow = false;
    for job in jobs {
        let pending = sizes[sizes.len() - 1];
        let total = pending + job.batch_size;
        if total > max_preferred && best.is_none() {
            best = Some(sizes.len() - 1);
        }
        if total > max_batch_size
            || !compatible(spec, &first.request.inputs, job)
            || cut.as_mut().is_some_and(|cut| !cut.include(&job.request))
        {
            cannot_grow = true;
            break;
        }
        oldest = oldest.min(job.enqueued_at);
        sizes.push(total);
        if preferred.contains(&total) {
            best = Some(sizes.len() - 1);
        }
    }
    let delay = settings.max_queue_delay;
    let delay_exceeded = !delay.is_zero() && now.duration_since(oldest) >= delay;
    match best {
        Some(i) if !delay_exceeded => Plan::Execute(i + 1),
        _ if cannot_grow || sizes[sizes.len() - 1] >= max_preferred => Plan::Execute(sizes.len()),
        _ if delay_exceeded || delay.is_zero() => Plan::Execute(sizes.len()),
        _ => Plan::WaitUntil(oldest + delay),
    }
}

/// What a batch that was handed over but not yet started (it waits for its rate-limiter
/// turn) takes from the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// Add the first `take` queued jobs; when `full`, the batch takes no more after them.
    Add {
        /// How many queued jobs join.
        take: usize,
        /// Whether the batch is closed to further jobs.
        full: bool,
    },
    /// Add nothing before this moment unless more requests come.
    WaitUntil(Instant),
}

/// Plans how a handed-over batch of `size`, whose first request has the inputs `first`,
/// grows from `queues` at `now`, by the rules of [`plan_batch`] counted from its size
/// (Triton's batcher plans its waiting payload the same way): it takes the queued jobs
/// that reach its best preferred size at once, everything that fits once the delay has
/// passed or when it cannot grow further, and, while it is not at a preferred size,
/// whatever fits now rather than nothing. It is full once it reaches the largest
/// preferred size, the next job does not fit, or (without a delay) it is at a preferred
/// size.
pub fn plan_growth(
    settings: &DynamicBatchingSpec,
    spec: &ModelSpec,
    first: &[InputTensor],
    size: usize,
    queues: &PriorityQueues,
    now: Instant,
) -> Growth {
    let max_batch_size = spec.max_batch_size.max(1);
    let preferred = &settings.preferred_batch_sizes;
    let max_preferred = preferred.last().copied().unwrap_or(0);
    let delay = settings.max_queue_delay;
    if delay.is_zero() && preferred.contains(&size) {
        return Growth::Add {
            take: 0,
            full: true,
        };
    }
    let mut total = size;
    let mut walked = 0;
    let mut best = None;
    let mut full = false;
    let mut cannot_grow = false;
    let mut oldest: Option<Instant> = None;
    for job in queues.iter() {
        let next = total + job.batch_size;
        if next > max_preferred && best.is_none() {
            best = Some(walked);
            full = true;
        }
        if next > max_batch_size || !compatible(spec, first, job) {
            cannot_grow = true;
            break;
        }
        walked += 1;
        total = next;
        oldest = Some(oldest.map_or(job.enqueued_at, |o| o.min(job.enqueued_at)));
        if preferred.contains(&total) {
            best = Some(walked);
        }
    }
    let Some(oldest) = oldest else {
        // Not even the first queued job fits.
        return Growth::Add {
            take: 0,
            full: true,
        };
    };
    let delay_exceeded = !delay.is_zero() && now.duration_since(oldest) >= delay;
    match best {
        // The next job would outgrow the largest preferred size.
        Some(0) => Growth::Add {
            take: 0,
            full: true,
        },
        Some(take) if !delay_exceeded => Growth::Add {
            take,
            full: full || delay.is_zero(),
        },
        _ if cannot_grow || total >= max_preferred => Growth::Add {
            take: walked,
            full: true,
        },
        _ if delay_exceeded || delay.is_zero() || (!full && !preferred.contains(&size)) => {
            Growth::Add { take: walked, full }
        }
        _ => Growth::WaitUntil(oldest + delay),
    }
}
