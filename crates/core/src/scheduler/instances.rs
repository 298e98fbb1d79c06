//! Instance workers: one OS thread per model instance owns its backend state and pulls
//! whole payloads from a bounded multi-consumer channel, executes them and answers each
//! job. A thread exits when every sender is gone, after finishing what was queued.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::waiting_batch::WaitingBatch;
use super::warmup::WarmupSample;
use super::Job;
use crate::backend::{ComputeTiming, InstanceBackend, Outcome, Streamed, NOT_RESCHEDULABLE};
use crate::batch::Batch;
use crate::error::{Error, Result};
use crate::model::{ModelSpec, SchedulingSpec};
use crate::rate_limit::Registration;
use crate::request::{select_outputs, InferResponse, OutputTensor, Parameters};
use crate::request::{trace_inputs, trace_outputs};
use crate::response_stream::ResponseSender;
use crate::sequence_flags::SequenceId;
use crate::stats::{DeviceStats, ModelStats};
use crate::trace::{RequestTrace, TensorActivity};

/// The requests one instance executes together.
#[derive(Debug)]
pub struct Payload {
    /// The jobs, in batch order.
    pub jobs: Vec<Job>,
    /// The instance slot the scheduler reserved for this payload; dropping it (when the
    /// execution ends) lets the scheduler cut the next batch.
    pub slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Sequences the sequence batcher released since this instance's last payload; the
    /// backend drops their state before executing `jobs` (which may be empty).
    pub released: Vec<SequenceId>,
    /// Where the dynamic batcher adds the jobs that join this payload until its instance
    /// starts it (rate-limited instances only; see [`WaitingBatch`]).
    pub waiting: Option<Arc<WaitingBatch>>,
}

impl Payload {
    /// A payload of one job with no reserved slot (the default scheduler).
    pub fn single(job: Job) -> Self {
        Self {
            jobs: vec![job],
            slot: None,
            released: Vec::new(),
            waiting: None,
        }
    }
}

/// One model instance, ready for its worker: its name, its backend and, under
/// `--rate-limit=execution_count`, its turn (each execution waits for the turn and the
/// group's resources; without one it runs as soon as it is free).
pub struct Instance {
    /// `<group name>_<index within group>`, as Triton names instances.
    pub name: String,
    /// What executes its batches.
    pub backend: Box<dyn InstanceBackend>,
    /// Its registration with the rate limiter, if one is on.
    pub turn: Option<Registration>,
    /// The GPU it runs on (`KIND_GPU`), whose metrics series count its work.
    pub gpu: Option<u32>,
}

impl Instance {
    /// A CPU instance that runs as soon as it is free.
    pub fn unlimited(name: String, backend: Box<dyn InstanceBackend>) -> Self {
        Self {
            name,
            backend,
            turn: None,
            gpu: None,
        }
    }
}

/// The worker threads of one model version's instances. Workers can be added and
/// retired while the model serves (Triton's instance update): each has its own retire
/// signal besides the shared payload channel.
pub struct InstancePool {
    spec: Arc<ModelSpec>,
    stats: Arc<ModelStats>,
    /// The shared channel, kept to hand to workers added later.
    payloads: Receiver<Payload>,
    // Joined by `join` or `retire`; the lock is only taken then and by `add`.
    workers: Mutex<Vec<WorkerHandle>>,
    /// The dynamic batcher's instance slots, kept at one per worker as workers come and
    /// go (see [`Self::track_slots`]).
    slots: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    next_id: AtomicU64,
    /// Whether its instances wait for rate-limiter turns (the rate limiter is on for the
    /// whole server, so all of them or none do).
    waits_for_turns: AtomicBool,
}

/// A running worker: its thread and the signal that retires it.
struct WorkerHandle {
    id: WorkerId,
    thread: JoinHandle<()>,
    retire: Sender<()>,
}

/// Names one worker of a pool for [`InstancePool::retire`] (instance names may repeat
/// after an instance update).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerId(u64);

impl WorkerId {
    /// The id of the `n`th instance of a host that numbers its instances itself (the
    /// sequence batcher: one pool per instance).
    pub(crate) fn numbered(n: usize) -> Self {
        Self(n as u64)
    }

    /// The number [`Self::numbered`] made this id of.
    pub(crate) fn number(self) -> usize {
        self.0 as usize
    }
}

impl InstancePool {
    /// Starts one worker per instance, all pulling from `payloads`, each first running
    /// the `warmup` samples (on the calling thread, before the model can be ready); a
    /// failing sample fails the start.
    pub fn start(
        spec: Arc<ModelSpec>,
        stats: Arc<ModelStats>,
        instances: Vec<Instance>,
        payloads: Receiver<Payload>,
        warmup: &[WarmupSample],
    ) -> Result<Self> {
        let pool = Self {
            spec,
            stats,
            payloads,
            workers: Mutex::new(Vec::new()),
            slots: Mutex::new(None),
            next_id: AtomicU64::new(0),
            waits_for_turns: AtomicBool::new(false),
        };
        pool.add(instances, warmup)?;
        Ok(pool)
    }

    /// Starts workers for `instances` after warming each up, returning their ids in
    /// order; all or none: when a sample fails, none of them starts and the instances are
    /// dropped (finalized).
    pub fn add(&self, instances: Vec<Instance>, warmup: &[WarmupSample]) -> Result<Vec<WorkerId>> {
        let count = instances.len();
        if instances.iter().any(|i| i.turn.is_some()) {
            self.waits_for_turns.store(true, Ordering::Relaxed);
        }
        let mut ready = Vec::with_capacity(count);
        for Instance {
            name,
            backend,
            turn,
            gpu,
        } in instances
        {
            // Published before the model is ready, so its metrics are there from the start.
            if let Some(usage) = backend.state_usage() {
                self.stats.set_state_usage(&name, usage);
            }
            let (retire, retired) = crossbeam_channel::bounded(1);
            let mut worker = Worker {
                spec: self.spec.clone(),
                stats: self.stats.clone(),
                on_gpu: gpu.map(|device| self.stats.on_device(device)),
                instance: backend,
                turn,
                payloads: self.payloads.clone(),
                retired,
                name: name.clone(),
                line: Line::default(),
            };
            for sample in warmup {
                sample.run(&self.spec, &self.stats, &name, |jobs| {
                    worker.execute(Payload {
                        jobs,
                        slot: None,
                        released: Vec::new(),
                        waiting: None,
                    });
                })?;
            }
            ready.push((worker, retire));
        }
        let mut ids = Vec::with_capacity(count);
        let mut workers = self.workers.lock();
        for (worker, retire) in ready {
            let name = worker.name.clone();
            let thread = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || worker.run())
                .map_err(|e| Error::internal(format!("cannot start instance {name}: {e}")))?;
            let id = WorkerId(self.next_id.fetch_add(1, Ordering::Relaxed));
            ids.push(id);
            workers.push(WorkerHandle { id, thread, retire });
        }
        drop(workers);
        if let Some(slots) = self.slots.lock().as_ref() {
            slots.add_permits(count);
        }
        Ok(ids)
    }

    /// Whether its instances wait for rate-limiter turns before executing, so that a
    /// payload handed to a free one may still wait.
    pub fn waits_for_turns(&self) -> bool {
        self.waits_for_turns.load(Ordering::Relaxed)
    }

    /// The running workers, oldest first.
    pub fn workers(&self) -> Vec<WorkerId> {
        self.workers.lock().iter().map(|w| w.id).collect()
    }

    /// Stops the workers `ids` once they finish what they are executing, and waits for
    /// them (their instances are finalized when this returns); the other workers keep
    /// serving the channel.
    pub fn retire(&self, ids: &[WorkerId]) {
        let leaving: Vec<WorkerHandle> = {
            let mut workers = self.workers.lock();
            let (leaving, staying) = std::mem::take(&mut *workers)
                .into_iter()
                .partition(|w| ids.contains(&w.id));
            *workers = staying;
            leaving
        };
        if let Some(slots) = self.slots.lock().clone() {
            forget_slots(slots, leaving.len());
        }
        for worker in &leaving {
            // A full signal means one is already waiting to be read.
            let _ = worker.retire.try_send(());
        }
        join_all(leaving);
    }

    /// The dynamic batcher's slots: one permit per worker, so `add` and `retire` keep
    /// the number of payloads it cuts at once equal to the number of workers.
    pub fn track_slots(&self, slots: Arc<tokio::sync::Semaphore>) {
        *self.slots.lock() = Some(slots);
    }

    /// A channel sized for `instances` workers: small, so that queued work waits in the
    /// scheduler (where it can be batched or reordered) rather than in the channel.
    pub fn channel(capacity: usize) -> (Sender<Payload>, Receiver<Payload>) {
        crossbeam_channel::bounded(capacity)
    }

    /// Waits for every worker to finish (their channel must be closed first).
    pub fn join(&self) {
        join_all(std::mem::take(&mut *self.workers.lock()));
    }
}

/// Takes `count` slots out of circulation: those free now at once, the others as the
/// payloads holding them end.
fn forget_slots(slots: Arc<tokio::sync::Semaphore>, count: usize) {
    let Ok(count) = u32::try_from(count) else {
        return;
    };
    if count == 0 {
        return;
    }
    if let Ok(free) = slots.try_acquire_many(count) {
        free.forget();
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        // Closed only when the batcher is gone, and then the count no longer matters.
        if let Ok(held) = slots.acquire_many_owned(count).await {
            held.forget();
        }
    });
}

fn join_all(workers: Vec<WorkerHandle>) {
    for worker in workers {
        if worker.thread.join().is_err() {
            tracing::error!("an instance worker panicked");
        }
    }
}

struct Worker {
    spec: Arc<ModelSpec>,
    stats: Arc<ModelStats>,
    /// A GPU instance's share of the statistics, for its GPU's metrics series.
    on_gpu: Option<Arc<DeviceStats>>,
    instance: Box<dyn InstanceBackend>,
    /// The rate limiter's turn each execution waits for, if one is on.
    turn: Option<Registration>,
    payloads: Receiver<Payload>,
    /// Signalled when an instance update removes this instance.
    retired: Receiver<()>,
    name: String,
    /// Under the rate limiter, the payload taken before the last execution released its
    /// resources, and whether that kept this instance's place in line.
    line: Line,
}

/// A worker's next payload taken while it held the rate limiter's resources, so that it
/// kept its place in line (see [`Registration::run_then`]).
#[derive(Default)]
struct Line {
    /// Taking ahead only once serving (never during warmup, whose failure would drop it).
    serving: bool,
    next: Option<Payload>,
    /// The place in line kept for `next`, until its execution waits for its turn.
    kept: bool,
}

impl Worker {
    fn run(mut self) {
        self.line.serving = true;
        loop {
            if let Some(payload) = self.line.next.take() {
                self.take(payload);
                if self.line.kept && self.line.next.is_none() {
                    // The payload did not execute (its callers left, or it only released
                    // sequences): the place in line goes to the others.
                    self.line.kept = false;
                    if let Some(turn) = &self.turn {
                        turn.leave_line();
                    }
                }
                continue;
            }
            crossbeam_channel::select! {
                recv(self.payloads) -> payload => match payload {
                    Ok(payload) => self.take(payload),
                    Err(_) => break,
                },
                recv(self.retired) -> signal => match signal {
                    Ok(()) => break,
                    // The pool is gone without retiring it: serve until the channel closes.
                    Err(_) => self.retired = crossbeam_channel::never(),
                },
            }
        }
    }

    fn take(&mut self, payload: Payload) {
        if !payload.released.is_empty() {
            self.instance.release_sequences(&payload.released);
        }
        if payload.jobs.is_empty() {
            self.publish_state_usage();
        } else {
            self.execute(payload);
        }
    }

    /// Whether a job whose caller left is dropped here rather than executed. Not for
    /// sequences: a step of a sequence carries its state and slot to the next step, and
    /// a sequence whose client left ends at its idle timeout.
    fn drops_cancelled(&self) -> bool {
        !matches!(self.spec.scheduling, SchedulingSpec::Sequence(_))
    }

    /// Hands the backend's state memory to the statistics (backends that keep state).
    fn publish_state_usage(&self) {
        if let Some(usage) = self.instance.state_usage() {
            self.stats.set_state_usage(&self.name, usage);
        }
    }

    fn execute(&mut self, payload: Payload) {
        let Payload {
            jobs,
            slot,
            waiting,
            ..
        } = payload;
        let drops = self.drops_cancelled();
        let jobs = live(jobs, drops);
        if jobs.is_empty() && waiting.is_none() {
            return;
        }
        if self.spec.decoupled {
            return self.execute_decoupled(jobs, waiting, slot);
        }
        let spec = &self.spec;
        let instance = &mut self.instance;
        let executed = in_turn(self.turn.as_ref(), &self.payloads, &mut self.line, || {
            let (payload, started) = start(jobs, waiting.as_deref(), drops)?;
            let mut timing = ComputeTiming::default();
            let (outcomes, total_batch) = {
                let batch = Batch::new(
                    spec,
                    payload.iter().map(|j| &j.request).collect(),
                    payload.iter().map(|j| j.batch_size).collect(),
                )
                .with_callers(
                    payload
                        .iter()
                        .map(|j| j.reply.presence().cloned())
                        .collect(),
                );
                (
                    instance.execute(&batch, &mut timing),
                    batch.total_batch_size(),
                )
            };
            Some((payload, outcomes, timing, total_batch, started))
        });
        let Some((mut payload, mut outcomes, timing, total_batch, started)) = executed else {
            return;
        };
        outcomes.resize_with(payload.len(), || {
            Outcome::from(Err(Error::internal(format!(
                "backend of model '{}' returned fewer responses than requests",
                self.spec.name
            ))))
        });
        // Output hooks (sequence state) run before the slot is released, so that the
        // next batch of this instance sees the state this one produced.
        let settled = payload
            .iter_mut()
            .zip(outcomes)
            .map(|(job, outcome)| match outcome {
                Outcome::Answered(mut result, parameters) => {
                    if let (Ok(outputs), Some(hook)) = (&mut result, job.on_outputs.take()) {
                        (hook.0)(outputs);
                    }
                    Settled::Kept((result, parameters))
                }
                Outcome::Rescheduled => Settled::Again(None),
            })
            .collect();
        let (payload, results) = settle_iterations(payload, settled);
        drop(slot);
        // Before the answers go out, so a client that got one sees the state it left.
        self.publish_state_usage();
        self.count_execution(&payload, total_batch, timing);
        for (job, (result, parameters)) in payload.into_iter().zip(results) {
            self.answer(job, result, parameters, started, timing);
        }
    }

    /// A batch of a decoupled model: each job's responses go to its stream, from
    /// whatever thread the backend sends them; the job is counted once the backend
    /// returns (its answers may still be streaming).
    fn execute_decoupled(
        &mut self,
        jobs: Vec<Job>,
        waiting: Option<Arc<WaitingBatch>>,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        let drops = self.drops_cancelled();
        let spec = &self.spec;
        let instance = &mut self.instance;
        let mut timing = ComputeTiming::default();
        let executed = in_turn(self.turn.as_ref(), &self.payloads, &mut self.line, || {
            let (mut payload, started) = start(jobs, waiting.as_deref(), drops)?;
            let senders = payload.iter_mut().map(|job| stream_of(spec, job)).collect();
            let (streamed, total_batch) = {
                let batch = Batch::new(
                    spec,
                    payload.iter().map(|j| &j.request).collect(),
                    payload.iter().map(|j| j.batch_size).collect(),
                );
                let streamed = instance.execute_decoupled(&batch, senders, &mut timing);
                (streamed, batch.total_batch_size())
            };
            Some((payload, streamed, total_batch, started))
        });
        let Some((payload, mut streamed, total_batch, started)) = executed else {
            return;
        };
        streamed.resize_with(payload.len(), || Streamed::Released);
        let settled = streamed
            .into_iter()
            .map(|streamed| match streamed {
                Streamed::Rescheduled(stream) => Settled::Again(Some(stream)),
                Streamed::Released => Settled::Kept(()),
            })
            .collect();
        let (payload, _) = settle_iterations(payload, settled);
        drop(slot);
        self.publish_state_usage();
        self.count_execution(&payload, total_batch, timing);
        for job in payload.into_iter().filter(|j| !j.padding) {
            if let Some(trace) = &job.request.trace {
                // Triton's backends release a request when its execution returns, which
                // records `REQUEST_END`; its responses may still be streaming.
                trace_execution(trace, &job, None, started, timing);
                trace.timestamp("REQUEST_END", Instant::now());
            }
            let queue = started.duration_since(job.enqueued_at);
            if let Some(device) = &self.on_gpu {
                device.request_succeeded(job.record.received_at().elapsed(), queue, timing);
            }
            job.streamed(queue, timing);
        }
    }

    /// Counts one execution of `payload` (padding not counted for clients, as Triton).
    fn count_execution(&self, payload: &[Job], total_batch: usize, timing: ComputeTiming) {
        let ran = timing.ran.unwrap_or(total_batch);
        if ran > 0 {
            let for_clients: usize = payload
                .iter()
                .filter(|j| !j.padding)
                .map(|j| j.batch_size)
                .sum();
            self.stats
                .execution_finished(ran, for_clients.min(ran), timing);
            if let Some(device) = &self.on_gpu {
                device.execution_finished(for_clients.min(ran));
            }
        }
    }

    fn answer(
        &self,
        job: Job,
        result: Result<Vec<OutputTensor>>,
        parameters: Parameters,
        started: Instant,
        timing: ComputeTiming,
    ) {
        if job.padding {
            return;
        }
        if let Some(trace) = &job.request.trace {
            trace_execution(trace, &job, Some(&result), started, timing);
        }
        let response = result.and_then(|outputs| self.response(&job, outputs, parameters));
        let queue = started.duration_since(job.enqueued_at);
        if let Some(device) = &self.on_gpu {
            match &response {
                Ok(_) => {
                    device.request_succeeded(job.record.received_at().elapsed(), queue, timing)
                }
                Err(_) => device.backend_failed(),
            }
        }
        job.answer(response, queue, timing);
    }

    /// Keeps the requested outputs, in the requested order (all, in model order, if none),
    /// each in the shape clients get (its `dims`, when the backend produced its `reshape`).
    fn response(
        &self,
        job: &Job,
        outputs: Vec<OutputTensor>,
        parameters: Parameters,
    ) -> Result<InferResponse> {
        let mut outputs = select_outputs(outputs, job.request.requested_outputs.as_deref());
        self.spec.reshape_outputs(&mut outputs)?;
        Ok(InferResponse {
            model_name: self.spec.name.clone(),
            model_version: self.spec.version,
            id: job.request.id.clone(),
            parameters,
            outputs,
        })
    }
}

/// The jobs of `jobs` whose callers still wait; with `drops`, the others are cancelled
/// here rather than executed.
fn live(jobs: Vec<Job>, drops: bool) -> Vec<Job> {
    if !drops || !jobs.iter().any(Job::caller_left) {
        return jobs;
    }
    let (live, gone): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|job| !job.caller_left());
    gone.into_iter().for_each(Job::cancel);
    live
}

/// Starts a payload once its instance may execute: the jobs that joined its waiting batch
/// meanwhile are added (those whose callers left dropped, as `drops` says), and every job
/// leaves its queue now. `None` when no job is left to execute.
fn start(
    mut jobs: Vec<Job>,
    waiting: Option<&WaitingBatch>,
    drops: bool,
) -> Option<(Vec<Job>, Instant)> {
    if let Some(waiting) = waiting {
        jobs.extend(live(waiting.start(), drops));
    }
    if jobs.is_empty() {
        return None;
    }
    for job in &mut jobs {
        job.record.executing();
    }
    Some((jobs, Instant::now()))
}

/// Where a decoupled job's responses go: its stream, or (padding, or a job queued
/// without one) a sender whose answers are discarded.
fn stream_of(spec: &ModelSpec, job: &mut Job) -> ResponseSender {
    job.stream.take().unwrap_or_else(|| {
        let model = spec.name.clone();
        ResponseSender::channel(Box::new(move |_| {
            Err(Error::internal(format!(
                "model '{model}': no one awaits this answer"
            )))
        }))
        .0
    })
}

/// Runs `execute` once it is the instance's turn under the rate limiter (at once without
/// one). While serving, the worker takes its next payload, if one is there, before the
/// resources go back, and keeps its place in line for it.
fn in_turn<T>(
    turn: Option<&Registration>,
    payloads: &Receiver<Payload>,
    line: &mut Line,
    execute: impl FnOnce() -> T,
) -> T {
    let Some(turn) = turn else {
        return execute();
    };
    line.kept = false;
    turn.run_then(execute, || {
        if line.serving && line.next.is_none() {
            line.next = payloads.try_recv().ok();
        }
        line.kept = line.next.is_some();
        line.kept
    })
}

/// What became of one job of an execution: kept to be answered with `T`, or rescheduled
/// (a decoupled one with the stream the backend handed back).
enum Settled<T> {
    Kept(T),
    Again(Option<ResponseSender>),
}

/// After an execution: sends the jobs the backend rescheduled back to their iterative
/// sequence (a decoupled one with the stream the backend handed back), ends the
/// iterative sequences whose job completed, and returns the jobs left to answer with
/// their results. A rescheduled job that is not part of an iterative sequence cannot
/// run again and is refused (padding is dropped).
fn settle_iterations<T>(payload: Vec<Job>, settled: Vec<Settled<T>>) -> (Vec<Job>, Vec<T>) {
    // The common case, on every execution: nothing rescheduled, no iterative sequence.
    if settled.iter().all(|s| matches!(s, Settled::Kept(_)))
        && payload.iter().all(|j| j.on_iteration.is_none())
    {
        let results = settled
            .into_iter()
            .filter_map(|s| match s {
                Settled::Kept(result) => Some(result),
                Settled::Again(_) => None,
            })
            .collect();
        return (payload, results);
    }
    let mut left = (
        Vec::with_capacity(payload.len()),
        Vec::with_capacity(payload.len()),
    );
    for (mut job, settled) in payload.into_iter().zip(settled) {
        match (settled, job.on_iteration.take()) {
            (Settled::Again(stream), hook) => {
                if stream.is_some() {
                    job.stream = stream;
                }
                match hook {
                    Some(hook) => (hook.0)(Some(job)),
                    None if job.padding => {}
                    None => job.reject(Error::invalid_arg(NOT_RESCHEDULABLE)),
                }
            }
            (Settled::Kept(result), hook) => {
                if let Some(hook) = hook {
                    (hook.0)(None);
                }
                left.0.push(job);
                left.1.push(result);
            }
        }
    }
    left
}

/// A traced job's execution: `COMPUTE_START`, `COMPUTE_INPUT_END`, `COMPUTE_OUTPUT_START`
/// and `COMPUTE_END` from the phases the backend measured for the statistics, and at the
/// `TENSORS` level the inputs the backend got and the outputs it produced.
///
/// A decoupled model's job has no `result`: its responses record their outputs as they are
/// sent.
fn trace_execution(
    trace: &RequestTrace,
    job: &Job,
    result: Option<&Result<Vec<OutputTensor>>>,
    started: Instant,
    timing: ComputeTiming,
) {
    let input_end = started + Duration::from_nanos(timing.input_ns);
    let output_start = input_end + Duration::from_nanos(timing.infer_ns);
    let end = output_start + Duration::from_nanos(timing.output_ns);
    trace.timestamp("COMPUTE_START", started);
    trace_inputs(trace, TensorActivity::BackendInput, &job.request.inputs);
    trace.timestamp("COMPUTE_INPUT_END", input_end);
    trace.timestamp("COMPUTE_OUTPUT_START", output_start);
    if let Some(Ok(outputs)) = result {
        trace_outputs(trace, outputs);
    }
    trace.timestamp("COMPUTE_END", end);
}
