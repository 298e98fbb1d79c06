//! Deciding what to execute: how many queued jobs (in service order) form the next batch,
//! or how long to wait for a fuller one. Pure, so it is tested without any runtime.

use std::time::Instant;

use super::queue::PriorityQueues;
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

/// Whether `job` may share a batch with `first`: same shapes for every input that does not
/// allow ragged batches (the batch dimension aside).
fn compatible(spec: &ModelSpec, first: &Job, job: &Job) -> bool {
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

/// Plans the next batch from `queues` at `now`.
pub fn plan_batch(
    settings: &DynamicBatchingSpec,
    spec: &ModelSpec,
    queues: &PriorityQueues,
    now: Instant,
) -> Plan {
    let max_batch_size = spec.max_batch_size.max(1);
    let mut jobs = queues.iter();
    let Some(first) = jobs.next() else {
        return Plan::WaitUntil(now + settings.max_queue_delay);
    };
    // Prefix sizes: sizes[i] = batch size of the first i + 1 jobs.
    let mut sizes = vec![first.batch_size];
    let mut oldest = first.enqueued_at;
    for job in jobs {
        let total = sizes[sizes.len() - 1] + job.batch_size;
        if total > max_batch_size || !compatible(spec, first, job) {
            break;
        }
        oldest = oldest.min(job.enqueued_at);
        sizes.push(total);
    }
    let pending = sizes[sizes.len() - 1];
    let largest_preferred = settings.preferred_batch_sizes.last().copied();
    let full = pending >= max_batch_size || largest_preferred.is_some_and(|p| pending >= p);
    let waited_enough = now.duration_since(oldest) >= settings.max_queue_delay;
    if !full && !waited_enough {
        return Plan::WaitUntil(oldest + settings.max_queue_delay);
    }
    // Cut at the largest preferred size the queue can fill exactly, else take everything
    // that fits.
    let cut = settings
        .preferred_batch_sizes
        .iter()
        .rev()
        .find_map(|&p| sizes.iter().position(|&s| s == p))
        .map_or(sizes.len(), |i| i + 1);
    Plan::Execute(cut)
}
