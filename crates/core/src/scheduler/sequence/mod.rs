//! The sequence batcher (`sequence_batching`) for stateful models: every request of a
//! sequence (same correlation ID) goes to the same instance and slot, in order; the model
//! gets START/END/READY/CORRID control tensors filled per request; sequences without a
//! free slot wait in a backlog; idle sequences are released.
//!
//! - [`controls`]: the control tensors.
//! - [`state`]: implicit state kept per sequence.
//! - [`table`]: slots, backlog and batch forming (the `direct` and `oldest` strategies).
//!
//! Each instance has a dispatcher task that forms its next batch as soon as the previous
//! one finished (one batch in flight per instance, as in Triton), first ending the
//! sequences whose next request's client left. Instances come and go with instance
//! updates ([`InstanceHost`]): an added one gets a dispatcher and slots; a retired one
//! serves the sequences it holds until they end, then its dispatcher stops and its
//! instance is finalized. A reaper task releases idle sequences,
//! fails backlogged ones whose request timed out and cancels backlogged ones whose
//! client left; it sleeps until the earliest such deadline. Request tasks, dispatchers and the reaper share one table
//! behind a mutex held only for short, await-free changes.

pub mod controls;
pub mod state;
pub mod table;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crossbeam_channel::Sender as PayloadSender;
use parking_lot::{Mutex, RwLock};
use tokio::runtime::Handle;
use tokio::sync::{Notify, Semaphore};

use self::controls::Controls;
use self::state::States;
use self::table::{Cancelled, Pending, Round, Table, CALLER_CHECK};
use super::hold::Hooks;
use super::WarmupSample;
use super::{
    stopping_error, Instance, InstanceHost, InstancePool, IterationHook, Job, OutputHook, Payload,
    Reply, Scheduler, WorkerId,
};
use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::presence::CallerPresence;
use crate::request::{InferRequest, ParamValue};
use crate::sequence_flags::{SequenceFlags, SequenceId};
use crate::stats::{ModelStats, RequestRecord};

/// What the request path, the dispatchers and the reaper share.
struct Shared {
    spec: Arc<ModelSpec>,
    stats: Arc<ModelStats>,
    controls: Controls,
    states: States,
    /// Locked briefly by all three (admit, form a round, reap); never across an await, so
    /// a parking_lot mutex suffices.
    table: Mutex<Table>,
    /// One per instance, by instance number: its dispatcher sleeps on it until there may
    /// be work. Grows with instance updates, never shrinks (numbers are not reused).
    wake: RwLock<Vec<Arc<Notify>>>,
    /// Each running instance's worker, by instance number; a retired instance's leaves
    /// when its dispatcher stops.
    hosts: Mutex<Vec<(usize, InstancePool)>>,
    /// The reaper sleeps on it until its next deadline, or until something is due sooner.
    reaper: Notify,
    stopping: AtomicBool,
    /// `iterative_sequence`: see [`Shared::iteration_hook`].
    iterative: bool,
    /// The next correlation ID for an iterative request sent without one. Triton counts
    /// up from 1, the IDs clients use themselves; counting down from the top keeps the
    /// two apart.
    next_iterative_id: AtomicU64,
}

/// Handle of a model version's sequence batcher.
pub struct SequenceBatcher {
    shared: Arc<Shared>,
    /// Where dispatchers run, including those of instances added later (an instance
    /// update runs off the runtime).
    runtime: Handle,
}

impl SequenceBatcher {
    /// Starts one worker and one dispatcher per instance, and the idle reaper, on the
    /// current tokio runtime, each instance warmed up with `warmup` first. The test hooks
    /// are read from the environment here, once.
    pub fn start(
        spec: Arc<ModelSpec>,
        stats: Arc<ModelStats>,
        instances: Vec<Instance>,
        model_dir: Option<&Path>,
        warmup: &[WarmupSample],
    ) -> Result<Self> {
        Self::start_with(spec, stats, instances, model_dir, warmup, Hooks::from_env())
    }

    /// [`Self::start`] with the given test hooks.
    pub(crate) fn start_with(
        spec: Arc<ModelSpec>,
        stats: Arc<ModelStats>,
        instances: Vec<Instance>,
        model_dir: Option<&Path>,
        warmup: &[WarmupSample],
        hooks: Hooks,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::internal("the sequence batcher needs a tokio runtime to run on"))?;
        let config = spec.scheduling.sequence().ok_or_else(|| {
            Error::internal(format!(
                "model '{}' has no sequence_batching settings",
                spec.name
            ))
        })?;
        let batching = spec.max_batch_size > 0;
        let controls = Controls::new(config.controls.clone(), batching);
        let states = States::new(&config.states, model_dir, batching)?
            .shown_to_clients(|name| spec.output(name).is_some());
        let max_batch = spec.max_batch_size.max(1);
        let per_instance = config.slots_per_instance(spec.max_batch_size);
        let strategy = config.strategy.clone();
        let idle = config.max_sequence_idle;
        let count = instances.len().max(1);
        // A backend that keeps state itself bounds the slots by what it can hold.
        let capacity = instances
            .iter()
            .filter_map(|i| i.backend.sequence_capacity())
            .min();
        let per_instance = capacity.unwrap_or(per_instance);
        if per_instance == 0 {
            return Err(Error::invalid_arg(format!(
                "model '{}' can hold no sequence state: raise max_candidate_sequences",
                spec.name
            )));
        }
        let ragged = spec.inputs.iter().filter(|i| i.allow_ragged_batch);
        let mut table = Table::new(&spec.name, count, per_instance, max_batch, strategy, idle)
            .with_hooks(hooks)
            .with_ragged_inputs(ragged.map(|i| i.name.clone()).collect());
        if capacity.is_some() {
            table = table.with_backend_state();
        }
        stats.set_sequence_occupancy(table.occupancy());
        let shared = Arc::new(Shared {
            spec: spec.clone(),
            stats: stats.clone(),
            controls,
            states,
            table: Mutex::new(table),
            reaper: Notify::new(),
            stopping: AtomicBool::new(false),
            iterative: config.iterative,
            next_iterative_id: AtomicU64::new(u64::MAX),
            wake: RwLock::default(),
            hosts: Mutex::default(),
        });
        let batcher = Self { shared, runtime };
        let started = batcher.start_workers(instances, warmup)?;
        for (index, (sender, pool)) in started.into_iter().enumerate() {
            batcher.serve(index, sender, pool);
        }
        batcher.runtime.spawn(reap(batcher.shared.clone()));
        Ok(batcher)
    }

    /// A worker for each of `instances`, each warmed up first; all or none (the started
    /// ones stop when their senders drop).
    fn start_workers(
        &self,
        instances: Vec<Instance>,
        warmup: &[WarmupSample],
    ) -> Result<Vec<(PayloadSender<Payload>, InstancePool)>> {
        let shared = &self.shared;
        instances
            .into_iter()
            .map(|instance| {
                // One channel per instance: a sequence's requests must reach its own
                // instance.
                let (sender, receiver) = InstancePool::channel(1);
                let pool = InstancePool::start(
                    shared.spec.clone(),
                    shared.stats.clone(),
                    vec![instance],
                    receiver,
                    warmup,
                )?;
                Ok((sender, pool))
            })
            .collect()
    }

    /// Starts the dispatcher of instance `index` (the table has its slots), feeding
    /// `pool` through `sender`.
    fn serve(&self, index: usize, sender: PayloadSender<Payload>, pool: InstancePool) {
        let shared = &self.shared;
        let wake = Arc::new(Notify::new());
        {
            let mut all = shared.wake.write();
            debug_assert_eq!(all.len(), index, "instances are numbered in order");
            all.push(wake.clone());
        }
        shared.hosts.lock().push((index, pool));
        self.runtime
            .spawn(dispatch(shared.clone(), index, wake, sender));
    }
}

/// Instance updates of a sequence-batched model: see the module's documentation.
impl InstanceHost for SequenceBatcher {
    fn add(&self, instances: Vec<Instance>, warmup: &[WarmupSample]) -> Result<Vec<WorkerId>> {
        let started = self.start_workers(instances, warmup)?;
        let mut ids = Vec::with_capacity(started.len());
        for (sender, pool) in started {
            let (index, wake) = self.shared.update(Table::add_instance);
            self.serve(index, sender, pool);
            self.shared.wake_all(wake);
            ids.push(WorkerId::numbered(index));
        }
        Ok(ids)
    }

    /// Does not wait: a retired instance serves its sequences to their end.
    fn retire(&self, ids: &[WorkerId]) {
        let shared = &self.shared;
        let indices: Vec<usize> = ids.iter().map(|id| id.number()).collect();
        shared.update(|t| {
            for &index in &indices {
                t.retire_instance(index);
            }
        });
        shared.wake_all(indices);
    }

    fn workers(&self) -> Vec<WorkerId> {
        let hosts = self.shared.hosts.lock();
        let table = self.shared.table.lock();
        hosts
            .iter()
            .filter(|(index, _)| !table.is_retired(*index))
            .map(|(index, _)| WorkerId::numbered(*index))
            .collect()
    }
}

impl Shared {
    fn wake_all(&self, instances: impl IntoIterator<Item = usize>) {
        let wake = self.wake.read();
        for i in instances {
            if let Some(n) = wake.get(i) {
                n.notify_one();
            }
        }
    }

    /// Instance `index`'s dispatcher stopped for good (retired and finished): its worker
    /// drains and exits, its instance is finalized, on a blocking thread.
    fn leave(&self, index: usize, runtime: &Handle) {
        let mut hosts = self.hosts.lock();
        if let Some(at) = hosts.iter().position(|(i, _)| *i == index) {
            let (_, pool) = hosts.remove(at);
            runtime.spawn_blocking(move || pool.join());
        }
    }

    /// Runs `change` on the table, publishes the new occupancy for the metrics, and wakes
    /// the reaper if the change made something due sooner than it planned to look.
    fn update<T>(&self, change: impl FnOnce(&mut Table) -> T) -> T {
        let mut table = self.table.lock();
        let result = change(&mut table);
        self.stats.set_sequence_occupancy(table.occupancy());
        if table.take_reaper_due() {
            self.reaper.notify_one();
        }
        result
    }

    /// Answers the requests of sequences cancelled because a client left (never
    /// executed, counted with reason CANCELED) and forgets the sequences' state.
    fn answer_cancelled(&self, cancelled: Cancelled) {
        for id in &cancelled.sequences {
            self.states.forget(id);
        }
        for pending in cancelled.requests {
            pending.job.cancel();
        }
    }

    /// What a padding request starts from: `request`'s client inputs (padding keeps the
    /// batch's shapes), no ID, every output.
    fn padding_base(&self, request: &InferRequest) -> InferRequest {
        InferRequest {
            inputs: request
                .inputs
                .iter()
                .filter(|i| self.spec.input(&i.name).is_some())
                .cloned()
                .collect(),
            requested_outputs: None,
            id: String::new(),
            ..request.clone()
        }
    }

    /// An iterative request without a correlation ID starts a sequence of its own, under
    /// an ID the server picks (Triton's iterative sequencer).
    fn begin_iteration(&self, request: &mut InferRequest) {
        if SequenceFlags::of(request, &self.spec.name).is_ok() {
            return;
        }
        let id = self.next_iterative_id.fetch_sub(1, Relaxed);
        request.set_parameter("sequence_id", ParamValue::Uint(id));
        request.set_parameter("sequence_start", ParamValue::Bool(true));
    }

    /// What follows each execution of iterative sequence `id`'s request: rescheduled, it
    /// queues again in the sequence's slot, as the client sent it and neither START nor
    /// END; completed, the sequence ends.
    fn iteration_hook(self: &Arc<Self>, id: SequenceId) -> IterationHook {
        let shared = self.clone();
        IterationHook(Box::new(move |job: Option<Job>| {
            let Some(mut job) = job else {
                let wake = shared.update(|t| t.finish(&id));
                shared.states.forget(&id);
                shared.wake_all(wake);
                return;
            };
            let spec = &shared.spec;
            job.request.inputs.retain(|i| spec.input(&i.name).is_some());
            job.request
                .set_parameter("sequence_start", ParamValue::Bool(false));
            job.request
                .set_parameter("sequence_end", ParamValue::Bool(false));
            let flags = SequenceFlags {
                id,
                start: false,
                end: false,
            };
            match shared.update(|t| t.requeue(Pending { job, flags })) {
                Ok(instance) => shared.wake_all([instance]),
                Err(pending) => pending.job.reject(Error::unavailable(format!(
                    "sequence {} of model '{}' ended before its rescheduled request could run again",
                    pending.flags.id, shared.spec.name
                ))),
            }
        }))
    }

    /// The job the instance runs for `pending`: its controls and state added.
    fn job_for(self: &Arc<Self>, Pending { mut job, flags }: Pending) -> Job {
        if self.iterative {
            job.on_iteration = Some(self.iteration_hook(flags.id.clone()));
        }
        let (state, ticket) = self.states.inputs(Some(&flags));
        job.request.inputs.extend(state);
        job.request
            .inputs
            .extend(self.controls.tensors(Some(&flags)));
        if let Some(ticket) = ticket {
            let shared = self.clone();
            job.on_outputs = Some(OutputHook(Box::new(move |outputs| {
                shared.states.keep(&ticket, outputs)
            })));
        }
        job
    }

    /// A padding job for an idle slot: `base`'s inputs, the initial state, READY false.
    fn padding_job(&self, base: &InferRequest) -> Job {
        let mut request = base.clone();
        request.inputs.extend(self.states.inputs(None).0);
        request.inputs.extend(self.controls.tensors(None));
        let (sender, _) = tokio::sync::oneshot::channel();
        let now = super::now();
        Job {
            request,
            batch_size: 1,
            reply: Reply::new(sender),
            record: RequestRecord::untracked(now),
            enqueued_at: now,
            span: tracing::Span::none(),
            padding: true,
            on_outputs: None,
            stream: None,
            on_iteration: None,
        }
    }
}

/// Forms and sends `instance`'s batches, one at a time, sleeping on `woken_by` between them;
/// stops when the batcher stops and nothing is left, or when the instance was retired
/// and its sequences are over.
async fn dispatch(
    shared: Arc<Shared>,
    instance: usize,
    woken_by: Arc<Notify>,
    payloads: PayloadSender<Payload>,
) {
    let in_flight = Arc::new(Semaphore::new(1));
    // The sequences of the batch in flight, with their callers' presence: their idle
    // clocks start when it has run (at once for a caller that left).
    let mut running: Vec<(SequenceId, Option<CallerPresence>)> = Vec::new();
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        // The permit is back: the previous batch finished executing.
        if !running.is_empty() {
            let finished: Vec<(SequenceId, bool)> = std::mem::take(&mut running)
                .into_iter()
                .map(|(id, caller)| (id, caller.is_some_and(|c| c.left())))
                .collect();
            shared.update(|t| t.executed(&finished, super::now()));
        }
        let (entries, released) = loop {
            let (round, wake, released, cancelled) = shared.update(|t| {
                let mut wake = t.cancel_left_heads(instance);
                let (round, more) = t.next_round(instance, super::now());
                wake.extend(more);
                (round, wake, t.take_releases(instance), t.take_cancelled())
            });
            shared.answer_cancelled(cancelled);
            shared.wake_all(wake);
            match round {
                Round::Ready(entries) => break (entries, released),
                Round::Wait(_) if !released.is_empty() => break (Vec::new(), released),
                Round::Wait(deadline) => {
                    let (stopped, finished) = {
                        let table = shared.table.lock();
                        let idle = !table.has_work(instance);
                        (
                            shared.stopping.load(Relaxed) && idle,
                            table.finished(instance),
                        )
                    };
                    if finished {
                        drop(payloads);
                        shared.leave(instance, &Handle::current());
                        return;
                    }
                    if stopped {
                        return;
                    }
                    let woken = woken_by.notified();
                    match deadline {
                        Some(at) => {
                            let _ = tokio::time::timeout_at(at.into(), woken).await;
                        }
                        None => woken.await,
                    }
                }
            }
        };
        running = entries
            .iter()
            .flatten()
            .map(|p| (p.flags.id.clone(), p.job.reply.presence().cloned()))
            .collect();
        // Padding copies the first real request's inputs; built only when a slot is idle.
        let base = entries
            .iter()
            .any(Option::is_none)
            .then(|| entries.iter().flatten().next())
            .flatten()
            .map(|p| shared.padding_base(&p.job.request));
        let jobs: Vec<Job> = entries
            .into_iter()
            .filter_map(|e| match e {
                Some(pending) => Some(shared.job_for(pending)),
                None => base.as_ref().map(|b| shared.padding_job(b)),
            })
            .collect();
        if jobs.is_empty() && released.is_empty() {
            continue;
        }
        // `send` on a bounded crossbeam channel blocks when it is full, but never here:
        // the channel holds one payload, and only the holder of this instance's single
        // `in_flight` permit sends. The permit rides in the payload and is released when
        // its execution ends, so the previous payload has always left the channel (the
        // worker took it) before the next permit can be acquired above.
        if payloads
            .send(Payload {
                jobs,
                slot: Some(permit),
                released,
                waiting: None,
            })
            .is_err()
        {
            return;
        }
    }
}

/// Releases idle sequences and fails backlogged sequences whose request timed out, until
/// the batcher stops. It sleeps until the table's earliest deadline; a change that makes
/// something due sooner wakes it (see [`Shared::update`]), and so does `stop`.
async fn reap(shared: Arc<Shared>) {
    loop {
        if shared.stopping.load(Relaxed) {
            return;
        }
        let now = super::now();
        let (reaped, cancelled, next, backlog) = shared.update(|t| {
            let reaped = t.reap(now);
            (reaped, t.take_cancelled(), t.next_reap(), t.has_backlog())
        });
        shared.answer_cancelled(cancelled);
        for id in &reaped.released {
            shared.states.forget(id);
        }
        for pending in reaped.timed_out {
            pending.job.reject(Error::unavailable(
                "timeout of the corresponding sequence has been expired",
            ));
        }
        shared.wake_all(reaped.wake);
        // A notification sent since `update` is kept by `Notify`, so none is lost.
        let woken = shared.reaper.notified();
        // Backlogged requests' callers are looked at while any wait (see `CALLER_CHECK`).
        let check = backlog.then(|| now + CALLER_CHECK);
        let next = match (next, check) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match next {
            Some(at) => {
                let _ = tokio::time::timeout_at(at.into(), woken).await;
            }
            None => woken.await,
        }
    }
}

impl Scheduler for SequenceBatcher {
    fn enqueue(&self, job: Job) -> Result<()> {
        let shared = &self.shared;
        if shared.stopping.load(Relaxed) {
            return Err(stopping_error());
        }
        if shared.spec.max_batch_size > 0 && job.batch_size != 1 {
            return Err(Error::invalid_arg(format!(
                "inference request to model '{}' must specify batch-size 1 due to requirements of sequence batcher",
                shared.spec.name
            )));
        }
        let mut job = job;
        if shared.iterative {
            shared.begin_iteration(&mut job.request);
        }
        let flags = SequenceFlags::of(&job.request, &shared.spec.name)?;
        let wake = shared.update(|t| {
            let mut wake = t.held();
            wake.extend(t.admit(Pending { job, flags }, super::now())?);
            Ok::<_, Error>(wake)
        })?;
        shared.wake_all(wake);
        Ok(())
    }

    fn stop(&self) {
        let shared = &self.shared;
        shared.stopping.store(true, Relaxed);
        let drained = shared.update(|t| {
            t.lift_holds();
            t.drain_backlog()
        });
        for pending in drained {
            pending.job.reject(stopping_error());
        }
        let count = shared.wake.read().len();
        shared.wake_all(0..count);
        shared.reaper.notify_one();
        let hosts = std::mem::take(&mut *shared.hosts.lock());
        for (_, pool) in hosts {
            pool.join();
        }
    }
}

#[cfg(test)]
mod tests;
