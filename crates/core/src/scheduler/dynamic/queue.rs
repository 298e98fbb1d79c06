//! The dynamic batcher's queue: one FIFO per priority level in use (1 is the highest),
//! each with its queue policy (`max_queue_size`, request timeouts with REJECT or DELAY).
//! Requests are served level by level; within a level, requests delayed by a timeout come
//! after the ones that have not timed out. A level exists only while requests wait at it,
//! so `priority_levels` may be any number, as in Triton.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use crate::model::{DynamicBatchingSpec, QueuePolicy};
use crate::scheduler::Job;

/// A queued job with its deadline.
#[derive(Debug)]
pub struct Queued {
    /// The job.
    pub job: Job,
    deadline: Option<Instant>,
}

#[derive(Debug)]
struct Level {
    policy: QueuePolicy,
    ready: VecDeque<Queued>,
    delayed: VecDeque<Queued>,
}

impl Level {
    fn len(&self) -> usize {
        self.ready.len() + self.delayed.len()
    }
}

/// The priority levels of one model that have requests waiting.
#[derive(Debug)]
pub struct PriorityQueues {
    config: DynamicBatchingSpec,
    /// By level number, so iteration is service order.
    levels: BTreeMap<u64, Level>,
}

impl PriorityQueues {
    /// Queues for the batching settings `config`.
    pub fn new(config: &DynamicBatchingSpec) -> Self {
        Self {
            config: config.clone(),
            levels: BTreeMap::new(),
        }
    }

    /// Number of queued jobs.
    pub fn len(&self) -> usize {
        self.levels.values().map(Level::len).sum()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `job` at its priority (0 or out of range means the default level, as in
    /// Triton); a full level (`max_queue_size`) hands it back.
    pub fn push(&mut self, job: Job) -> Result<(), Box<Job>> {
        let number = self.config.level_of(job.request.u64_parameter("priority"));
        let config = &self.config;
        let level = self.levels.entry(number).or_insert_with(|| Level {
            policy: config.policy(number),
            ready: VecDeque::new(),
            delayed: VecDeque::new(),
        });
        if level.policy.max_queue_size > 0 && level.len() >= level.policy.max_queue_size {
            return Err(Box::new(job));
        }
        let deadline = level
            .policy
            .timeout(job.request.u64_parameter("timeout"))
            .map(|t| job.enqueued_at + t);
        level.ready.push_back(Queued { job, deadline });
        Ok(())
    }

    /// Applies timeouts at `now`: REJECT levels hand back the expired jobs, DELAY levels
    /// move them behind the level's other requests.
    pub fn expire(&mut self, now: Instant) -> Vec<Job> {
        let mut rejected = Vec::new();
        for level in self.levels.values_mut() {
            let mut kept = VecDeque::with_capacity(level.ready.len());
            for mut q in level.ready.drain(..) {
                match q.deadline {
                    Some(d) if d <= now => {
                        if level.policy.reject_on_timeout {
                            rejected.push(q.job);
                        } else {
                            q.deadline = None;
                            level.delayed.push_back(q);
                        }
                    }
                    _ => kept.push_back(q),
                }
            }
            level.ready = kept;
        }
        self.forget_empty_levels();
        rejected
    }

    /// The earliest timeout among queued jobs.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.levels
            .values()
            .flat_map(|l| l.ready.iter().filter_map(|q| q.deadline))
            .min()
    }

    /// Jobs in service order: level by level, ready before delayed.
    pub fn iter(&self) -> impl Iterator<Item = &Job> {
        self.levels
            .values()
            .flat_map(|l| l.ready.iter().chain(l.delayed.iter()))
            .map(|q| &q.job)
    }

    /// Removes and returns the first `n` jobs in service order.
    pub fn take(&mut self, mut n: usize) -> Vec<Job> {
        let mut out = Vec::with_capacity(n);
        for level in self.levels.values_mut() {
            for queue in [&mut level.ready, &mut level.delayed] {
                while n > 0 {
                    let Some(q) = queue.pop_front() else { break };
                    out.push(q.job);
                    n -= 1;
                }
            }
        }
        self.forget_empty_levels();
        out
    }

    /// Drops the levels nothing waits at, so levels used once cost nothing after.
    fn forget_empty_levels(&mut self) {
        self.levels.retain(|_, level| level.len() > 0);
    }
}
