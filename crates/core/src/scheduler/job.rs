//! A validated request on its way through a scheduler to an instance, carrying its reply
//! channel and its statistics entry, so that however a job ends (answered, refused,
//! expired, dropped at shutdown) it is answered and counted in one place.

use std::time::{Duration, Instant};

use super::Reply;
use crate::backend::ComputeTiming;
use crate::error::{Error, ErrorKind, Result};
use crate::request::{InferRequest, InferResponse, OutputTensor};
use crate::response_stream::ResponseSender;
use crate::stats::{FailureReason, RequestRecord};

/// A validated request travelling through a scheduler to an instance.
#[derive(Debug)]
pub struct Job {
    /// The request.
    pub request: InferRequest,
    /// Its batch size (1 for models without batching).
    pub batch_size: usize,
    /// Where the answer goes; the caller awaits the other end.
    pub reply: Reply,
    /// Its entry in the model's statistics; dropping the job unanswered counts it as
    /// rejected.
    pub record: RequestRecord,
    /// When the request entered the queue (for queue-time statistics).
    pub enqueued_at: Instant,
    /// The request's tracing span, so instance-side events are attributed to it.
    pub span: tracing::Span,
    /// A stand-in the sequence batcher adds for an idle slot: executed, never answered
    /// and not counted in the statistics.
    pub padding: bool,
    /// Runs on the job's outputs before the response is built (the sequence batcher
    /// takes the state outputs out there).
    pub on_outputs: Option<OutputHook>,
    /// For a request of a decoupled model: where its responses go (the reply is unused).
    pub stream: Option<ResponseSender>,
    /// For the request of an iterative sequence: what follows each of its executions.
    pub on_iteration: Option<IterationHook>,
}

/// The callback inside an [`IterationHook`]: `Some(job)` when the backend rescheduled
/// the job (it runs again), `None` when the job completed (its sequence ends).
pub type IterationCallback = Box<dyn FnOnce(Option<Job>) + Send>;

/// What follows an execution of an iterative sequence's request.
pub struct IterationHook(pub IterationCallback);

impl std::fmt::Debug for IterationHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IterationHook")
    }
}

/// The callback inside an [`OutputHook`].
pub type OutputCallback = Box<dyn FnOnce(&mut Vec<OutputTensor>) + Send>;

/// A callback on a job's outputs.
pub struct OutputHook(pub OutputCallback);

impl std::fmt::Debug for OutputHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputHook")
    }
}

impl Job {
    /// Answers a job that will not run (full queue, expired timeout, stopping) with
    /// `error`; it counts as rejected by the scheduler.
    pub fn reject(mut self, error: Error) {
        self.record.failed(FailureReason::Rejected);
        if let Some(stream) = self.stream.take() {
            stream.send(Err(error), true);
            return;
        }
        self.reply.send(Err(error));
    }

    /// Whether nobody waits for this job's answer any more: the caller of a request went
    /// away (connection closed, call cancelled, stream closed). Padding has no caller.
    pub fn caller_left(&self) -> bool {
        if self.padding {
            return false;
        }
        match &self.stream {
            Some(stream) => stream.is_cancelled(),
            None => self.reply.caller_left(),
        }
    }

    /// Ends a job whose caller left before it executed, as Triton's schedulers end a
    /// cancelled request: never executed, counted as a failure with reason CANCELED.
    pub fn cancel(mut self) {
        self.record.failed(FailureReason::Canceled);
        let error = Error::new(
            ErrorKind::Cancelled,
            "request cancelled: the client went away",
        );
        if let Some(stream) = self.stream.take() {
            stream.send(Err(error), true);
            return;
        }
        self.reply.send(Err(error));
    }

    /// Counts a job of a decoupled model once its execution has handed the responses to
    /// their stream: a success that waited `queue` and computed for `timing` (errors go
    /// to the client in the stream).
    pub fn streamed(self, queue: Duration, timing: ComputeTiming) {
        self.record.succeeded(queue, timing);
    }

    /// Answers a job an instance executed: a success that waited `queue` and computed for
    /// `timing`, or a failure of the backend. Statistics are counted before the answer
    /// goes out, so a client that has its answer sees them.
    pub fn answer(self, response: Result<InferResponse>, queue: Duration, timing: ComputeTiming) {
        match &response {
            Ok(_) => self.record.succeeded(queue, timing),
            Err(e) => {
                tracing::debug!(parent: &self.span, error = %e, "inference failed");
                self.record.failed(FailureReason::Backend);
            }
        }
        self.reply.send(response);
    }
}
