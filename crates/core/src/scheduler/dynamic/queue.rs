//! The dynamic batcher's queue: one FIFO per priority level (1 is the highest), each with
//! its queue policy (`max_queue_size`, request timeouts with REJECT or DELAY). Requests are
//! served level by level; within a level, requests delayed by a timeout come after the
//! ones that have not timed out.

use std::collections::VecDeque;
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

/// All priority levels of one model.
#[derive(Debug)]
pub struct PriorityQueues {
    levels: Vec<Level>,
    default_level: usize,
}

impl PriorityQueues {
    /// Queues for the batching settings `config`.
    pub fn new(config: &DynamicBatchingSpec) -> Self {
        let levels = config
            .levels
            .iter()
            .map(|&policy| Level {
                policy,
                ready: VecDeque::new(),
                delayed: VecDeque::new(),
            })
            .collect();
        Self {
            levels,
            default_level: config.default_level,
        }
    }

    /// Number of queued jobs.
    pub fn len(&self) -> usize {
        self.levels.iter().map(Level::len).sum()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `job` at its priority (0 or out of range means the default level, as in
    /// Triton); a full level (`max_queue_size`) hands it back.
    pub fn push(&mut self, job: Job) -> Result<(), Box<Job>> {
        let index = match job.request.u64_parameter("priority") {
            Some(p) if p >= 1 && (p as usize) <= self.levels.len() => p as usize - 1,
            _ => self.default_level,
        };
        let level = &mut self.levels[index];
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
        for level in &mut self.levels {
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
        rejected
    }

    /// The earliest timeout among queued jobs.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.levels
            .iter()
            .flat_map(|l| l.ready.iter().filter_map(|q| q.deadline))
            .min()
    }

    /// Jobs in service order: level by level, ready before delayed.
    pub fn iter(&self) -> impl Iterator<Item = &Job> {
        self.levels
            .iter()
            .flat_map(|l| l.ready.iter().chain(l.delayed.iter()))
            .map(|q| &q.job)
    }

    /// Removes and returns the first `n` jobs in service order.
    pub fn take(&mut self, mut n: usize) -> Vec<Job> {
        let mut out = Vec::with_capacity(n);
        for level in &mut self.levels {
            for queue in [&mut level.ready, &mut level.delayed] {
                while n > 0 {
                    let Some(q) = queue.pop_front() else { break };
                    out.push(q.job);
                    n -= 1;
                }
            }
        }
        out
    }
}
