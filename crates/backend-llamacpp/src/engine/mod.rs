//! The engine of one model instance: a thread that owns a llama.cpp context and
//! generates for every request it holds at once (continuous batching). Each step is one
//! `decode` of one batch: a token for every sequence that is generating, then pieces of
//! the prompts still being read, up to the step's token budget. A new request takes a
//! free sequence slot at the next step; a finished or cancelled one frees its slot (and
//! its KV cache) at once. Requests beyond the slots wait in a bounded queue; beyond that
//! they are refused at once, as Triton's schedulers refuse a full queue.

mod sampler;
mod sequence;
mod step;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Sender, TrySendError};
use nereid_core::{Error, Result};

use crate::metrics::EngineMetrics;
use crate::model::Llm;
pub use sequence::Job;

/// The handle an instance keeps: the queue into its engine thread. Dropping it ends the
/// thread, failing the requests still in it.
pub struct Engine {
    jobs: Option<Sender<Job>>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    metrics: Arc<EngineMetrics>,
    slots: i64,
}

impl Engine {
    /// Starts the engine thread of instance `instance` of `llm`, counting into
    /// `metrics`; fails when llama.cpp cannot create the context (memory, a context
    /// length the model cannot take).
    pub fn start(llm: Arc<Llm>, metrics: Arc<EngineMetrics>, instance: &str) -> Result<Self> {
        let (jobs, queue) = bounded(llm.args.max_queue_size as usize);
        let slots = i64::from(llm.args.max_num_seqs);
        let stopping = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("llamacpp-{instance}"))
            .spawn({
                let stopping = stopping.clone();
                let metrics = metrics.clone();
                move || step::run(&llm, &metrics, queue, &stopping, ready_tx)
            })
            .map_err(|e| Error::internal(format!("unable to start the engine thread: {e}")))?;
        let started = ready_rx.recv().unwrap_or_else(|_| {
            Err(Error::internal(
                "the engine thread ended before creating its context",
            ))
        });
        started?;
        metrics.add_slots(slots);
        Ok(Self {
            jobs: Some(jobs),
            stopping,
            thread: Some(thread),
            metrics,
            slots,
        })
    }

    /// Queues `job`; a full queue answers it at once with Triton's queue error.
    pub fn submit(&self, job: Job) {
        let Some(jobs) = &self.jobs else {
            return;
        };
        match jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => {
                job.sender
                    .send(Err(Error::unavailable("Exceeds maximum queue size")), true);
            }
            Err(TrySendError::Disconnected(job)) => {
                job.sender.send(
                    Err(Error::unavailable("the llama.cpp engine has stopped")),
                    true,
                );
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Closing the queue wakes an idle engine.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("a llama.cpp engine thread panicked");
            }
        }
        self.metrics.add_slots(-self.slots);
    }
}
