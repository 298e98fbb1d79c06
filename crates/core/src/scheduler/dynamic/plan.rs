//! Deciding what to execute: how many queued jobs (in service order) form the next batch,
//! or how long to wait for a fuller one. Pure, so it is tested without any runtime.

use std::time::Instant;

use super::queue::PriorityQueues;
use super::strategy::BatchStrategy;
use crate::model::{DynamicBatchingSpec, ModelSpec};
use crate::scheduler::Job;

/// The batcher's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Execute the first `n` jobs now.
    Execute(usize),
    /// Wait (for more requests) until this moment at the latest.
    WaitUntil(Instant),
}

/// Whether `job` may share a batch with `first`: the same inputs (requests leaving out
/// different optional inputs never batch together, as in Triton), with the same shapes
/// for every input that does not allow ragged batches (the batch dimension aside).
fn compatible(spec: &ModelSpec, first: &Job, job: &Job) -> bool {
    if first.request.inputs.len() != job.request.inputs.len() {
        return false;
    }
    first.request.inputs.iter().all(|a| {
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
            || !compatible(spec, first, job)
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
