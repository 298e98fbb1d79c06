//! The dynamic batcher (`dynamic_batching`): one task per model version owns the priority
//! queues and cuts a batch whenever an instance is free, so requests that arrive while
//! every instance is busy are executed together. Preferred batch sizes and the maximum
//! queue delay decide whether to run what is queued now or to wait for more.

mod plan;
mod queue;
pub mod strategy;

use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender as PayloadSender;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::sleep_until;

use self::plan::{plan_batch, plan_growth, Growth, Plan};
use self::queue::PriorityQueues;
use self::strategy::BatchStrategy;
use super::hold::{Hold, Hooks};
use super::intake::Intake;
use super::waiting_batch::WaitingBatch;
use super::{InstancePool, Job, Payload, ReplyOrder, Scheduler, DEFAULT_QUEUE_CAPACITY};
use crate::error::{Error, Result};
use crate::model::{DynamicBatchingSpec, ModelSpec, SchedulingSpec};
use crate::request::InputTensor;

/// Handle of a model version's dynamic batcher.
pub struct DynamicBatcher {
    // Closing it lets the task drain its queue and end.
    intake: Intake<mpsc::Sender<Job>>,
    pool: Arc<InstancePool>,
}

impl DynamicBatcher {
    /// Starts the batching task for `spec` on the current tokio runtime. `instances`
    /// is the number of workers behind `payloads`; `strategy` is the model's custom
    /// batching rule, if it has one. The test hooks are read from the environment here,
    /// once.
    pub fn start(
        spec: Arc<ModelSpec>,
        payloads: PayloadSender<Payload>,
        pool: Arc<InstancePool>,
        instances: usize,
        strategy: Option<Arc<dyn BatchStrategy>>,
    ) -> Result<Self> {
        Self::start_with(spec, payloads, pool, instances, strategy, Hooks::from_env())
    }

    /// [`Self::start`] with the given test hooks (only `queued` applies here).
    pub(crate) fn start_with(
        spec: Arc<ModelSpec>,
        payloads: PayloadSender<Payload>,
        pool: Arc<InstancePool>,
        instances: usize,
        strategy: Option<Arc<dyn BatchStrategy>>,
        hooks: Hooks,
    ) -> Result<Self> {
        let config = match &spec.scheduling {
            SchedulingSpec::Dynamic(d) => d.clone(),
            _ => DynamicBatchingSpec::default(),
        };
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::internal("the dynamic batcher needs a tokio runtime to run on"))?;
        let (sender, receiver) = mpsc::channel(DEFAULT_QUEUE_CAPACITY);
        let slots = Arc::new(Semaphore::new(instances.max(1)));
        // Instance updates add and retire workers; the pool keeps the slots in step.
        pool.track_slots(slots.clone());
        // A batch handed to a free instance starts at once, unless the instance must wait
        // for its rate-limiter turn; only then is it kept open to grow. (A custom strategy
        // decides each batch once, so its batches are not grown.)
        let grows = pool.waits_for_turns() && strategy.is_none();
        let task = BatcherTask {
            queues: PriorityQueues::new(&config),
            order: config
                .preserve_ordering
                .then(|| Arc::new(ReplyOrder::default())),
            config,
            spec,
            strategy,
            receiver,
            payloads,
            slots,
            hold: Hold::until(hooks.queued),
            grows,
            waiting: None,
        };
        // Triton's verbose line, which L0_backend_config reads to see batching is on (the
        // batcher here is a task on the runtime, not a thread of its own).
        tracing::debug!(
            "Starting dynamic-batcher thread for {} at default nice...",
            task.spec.name
        );
        runtime.spawn(task.run());
        Ok(Self {
            intake: Intake::new(sender),
            pool,
        })
    }
}

impl Scheduler for DynamicBatcher {
    fn enqueue(&self, job: Job) -> Result<()> {
        self.intake.send_with(|sender| {
            sender.try_send(job).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => {
                    Error::unavailable("Exceeds maximum queue size")
                }
                mpsc::error::TrySendError::Closed(_) => {
                    Error::unavailable("the model's scheduler has stopped")
                }
            })
        })
    }

    fn stop(&self) {
        self.intake.close();
        self.pool.join();
    }
}

/// The task that owns the queues.
struct BatcherTask {
    config: DynamicBatchingSpec,
    queues: PriorityQueues,
    order: Option<Arc<ReplyOrder>>,
    spec: Arc<ModelSpec>,
    /// The model's custom batching rule; dropped (finalized) when the task ends.
    strategy: Option<Arc<dyn BatchStrategy>>,
    receiver: mpsc::Receiver<Job>,
    payloads: PayloadSender<Payload>,
    /// One permit per instance; a payload holds one until its execution ends.
    slots: Arc<Semaphore>,
    /// `TRITONSERVER_DELAY_SCHEDULER`: nothing is planned (nor timed out) until this many
    /// requests are queued, as in Triton's batcher thread.
    hold: Hold,
    /// Whether handed-over batches are kept open until their instance starts them (the
    /// instances wait for rate-limiter turns).
    grows: bool,
    /// The last batch handed over, while it may still grow.
    waiting: Option<Waiting>,
}

/// A handed-over batch that may still grow, with what planning its growth needs.
struct Waiting {
    batch: Arc<WaitingBatch>,
    /// The inputs of its first request, which later ones must match.
    first: Vec<InputTensor>,
    /// Its batch size so far.
    size: usize,
}

/// What became of the waiting batch after growing it.
enum Grown {
    /// It took jobs from the queue; look at the queue again.
    Again,
    /// It waits for more requests until this moment.
    WaitUntil(Instant),
    /// There is none open (it is full or started): cut new batches.
    Closed,
}

impl BatcherTask {
    async fn run(mut self) {
        let mut slot: Option<OwnedSemaphorePermit> = None;
        let mut open = true;
        loop {
            while let Ok(job) = self.receiver.try_recv() {
                self.ingest(job);
            }
            if !open {
                // Stopping: what is queued must drain.
                self.hold.lift();
            }
            let queued = self.queues.len();
            if self.hold.holds(|n| queued >= n) {
                match self.receiver.recv().await {
                    Some(job) => self.ingest(job),
                    None => open = false,
                }
                continue;
            }
            for job in self.queues.expire(super::now()) {
                job.reject(Error::unavailable("Request timeout expired"));
            }
            if self.queues.is_empty() {
                if !open {
                    break;
                }
                match self.receiver.recv().await {
                    Some(job) => self.ingest(job),
                    None => open = false,
                }
                continue;
            }
            let deadline = self.queues.next_deadline();
            match self.grow() {
                Grown::Again => continue,
                Grown::WaitUntil(until) => {
                    let wake = deadline.map_or(until, |d| d.min(until));
                    let started = self.waiting.as_ref().map(|w| w.batch.clone());
                    tokio::select! {
                        job = self.receiver.recv(), if open => match job {
                            Some(job) => self.ingest(job),
                            None => open = false,
                        },
                        () = sleep_until(wake.into()) => {}
                        () = started_opt(started.as_deref()) => {}
                    }
                    continue;
                }
                Grown::Closed => {}
            }
            if slot.is_none() {
                slot = self.slots.clone().try_acquire_owned().ok();
            }
            let Some(held) = slot.take() else {
                tokio::select! {
                    permit = self.slots.clone().acquire_owned() => slot = permit.ok(),
                    job = self.receiver.recv(), if open => match job {
                        Some(job) => self.ingest(job),
                        None => open = false,
                    },
                    () = sleep_until_opt(deadline) => {}
                }
                continue;
            };
            let strategy = self.strategy.as_deref();
            match plan_batch(
                &self.config,
                &self.spec,
                &self.queues,
                strategy,
                super::now(),
            ) {
                Plan::Execute(count) => {
                    let jobs = self.queues.take(count);
                    self.dispatch(jobs, held);
                }
                Plan::WaitUntil(until) => {
                    slot = Some(held);
                    let wake = deadline.map_or(until, |d| d.min(until));
                    tokio::select! {
                        job = self.receiver.recv(), if open => match job {
                            Some(job) => self.ingest(job),
                            None => open = false,
                        },
                        () = sleep_until(wake.into()) => {}
                    }
                }
            }
        }
    }

    fn ingest(&mut self, mut job: Job) {
        if let Some(order) = &self.order {
            job.reply.order_by(order);
        }
        if let Err(job) = self.queues.push(job) {
            job.reject(Error::unavailable("Exceeds maximum queue size"));
        }
    }

    /// Adds queued jobs to the batch waiting for its instance, as [`plan_growth`] says.
    fn grow(&mut self) -> Grown {
        let Some(waiting) = &mut self.waiting else {
            return Grown::Closed;
        };
        let queues = &mut self.queues;
        let growth = plan_growth(
            &self.config,
            &self.spec,
            &waiting.first,
            waiting.size,
            queues,
            super::now(),
        );
        let grown = waiting.batch.while_waiting(|added| match growth {
            Growth::Add { take, full } => {
                let jobs = queues.take(take);
                waiting.size += jobs.iter().map(|j| j.batch_size).sum::<usize>();
                added.extend(jobs);
                let next = if take > 0 {
                    Grown::Again
                } else {
                    Grown::Closed
                };
                (next, full || take == 0)
            }
            Growth::WaitUntil(until) => (Grown::WaitUntil(until), false),
        });
        // `None`: an instance has started it.
        let (grown, closed) = grown.unwrap_or((Grown::Closed, true));
        if closed {
            self.waiting = None;
        }
        grown
    }

    fn dispatch(&mut self, jobs: Vec<Job>, slot: OwnedSemaphorePermit) {
        let waiting = self.grows.then(|| {
            let waiting = Waiting {
                batch: WaitingBatch::new(),
                first: jobs
                    .first()
                    .map(|j| j.request.inputs.clone())
                    .unwrap_or_default(),
                size: jobs.iter().map(|j| j.batch_size).sum(),
            };
            let batch = waiting.batch.clone();
            self.waiting = Some(waiting);
            batch
        });
        let payload = Payload {
            jobs,
            slot: Some(slot),
            released: Vec::new(),
            waiting,
        };
        // The channel has room for as many payloads as a model can have instances and a
        // payload is only sent with a free slot (one per instance), so this never blocks;
        // it fails only if the workers are gone.
        if let Err(e) = self.payloads.send(payload) {
            self.waiting = None;
            for job in e.into_inner().jobs {
                job.reject(Error::unavailable("model instances have stopped"));
            }
        }
    }
}

async fn started_opt(batch: Option<&WaitingBatch>) {
    match batch {
        Some(batch) => batch.started().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
