//! Warming an instance up before its model is ready (`model_warmup`, Triton's
//! `TritonModelInstance::WarmUp`): each sample's requests run as one batch through the
//! instance's own execute path, `count` times, so they are counted in the statistics
//! and metrics as Triton counts them; the first sample whose responses carry an error
//! fails the model's load, naming the sample.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::job::Job;
use super::reply::Reply;
use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::{InferRequest, InferResponse};
use crate::response_stream::{ResponseSender, ResponseStream};
use crate::stats::{FailureReason, ModelStats, RequestRecord};

/// One `model_warmup` entry, its requests built (see the repository's `warmup.rs`).
#[derive(Debug, Clone)]
pub struct WarmupSample {
    /// The sample's `name`, for logs and errors.
    pub name: String,
    /// How many times the batch runs (`count`; 0 runs it once, as in Triton).
    pub count: u32,
    /// `batch_size` requests, executed together.
    pub requests: Vec<InferRequest>,
    /// Each request's batch size (1 for a batching model's single-row request).
    pub batch_size: usize,
}

/// What one execution of a sample answers: each request's answer, or its stream.
enum Answer {
    Single(oneshot::Receiver<Result<InferResponse>>),
    Streamed(ResponseStream),
}

impl WarmupSample {
    /// Runs the sample `count` times through `execute` (the instance's executor, given
    /// the jobs of one batch), waiting for every answer each time; errors are collected
    /// as Triton reports them.
    pub(super) fn run(
        &self,
        spec: &ModelSpec,
        stats: &Arc<ModelStats>,
        instance: &str,
        mut execute: impl FnMut(Vec<Job>),
    ) -> Result<()> {
        for iteration in 1..=self.count.max(1) {
            // Triton's verbose line, which its QA greps (L0_warmup).
            tracing::debug!(
                "model '{}' instance {instance} is running warmup sample '{}' for iteration {iteration}",
                spec.name,
                self.name
            );
            let (jobs, answers): (Vec<Job>, Vec<Answer>) = self
                .requests
                .iter()
                .map(|request| self.job(spec, stats, request))
                .unzip();
            execute(jobs);
            let errors: Vec<String> = answers.into_iter().flat_map(errors_of).collect();
            if !errors.is_empty() {
                let mut message = format!("failed to run warmup sample '{}': ", self.name);
                for error in errors {
                    message.push_str(&error);
                    message.push_str("; ");
                }
                return Err(Error::invalid_arg(message));
            }
        }
        Ok(())
    }

    /// A job for `request`, counted in `stats` like a client's, and where its answer goes.
    fn job(
        &self,
        spec: &ModelSpec,
        stats: &Arc<ModelStats>,
        request: &InferRequest,
    ) -> (Job, Answer) {
        let now = Instant::now();
        let (reply, single) = oneshot::channel();
        let (stream, answer) = if spec.decoupled {
            let (sender, stream) = ResponseSender::channel(Box::new(|outputs| {
                Ok(InferResponse {
                    model_name: String::new(),
                    model_version: 0,
                    id: String::new(),
                    parameters: Vec::new(),
                    outputs: outputs.into(),
                })
            }));
            (Some(sender), Answer::Streamed(stream))
        } else {
            (None, Answer::Single(single))
        };
        let job = Job {
            request: request.clone(),
            batch_size: self.batch_size,
            reply: Reply::new(reply),
            record: RequestRecord::open(stats.clone(), now, None, FailureReason::Rejected),
            enqueued_at: now,
            span: tracing::Span::none(),
            padding: false,
            on_outputs: None,
            stream,
            on_iteration: None,
        };
        (job, answer)
    }
}

/// The errors one request answered with, once its answer is complete. A decoupled
/// model's responses may still be streaming from the backend's threads: this waits for
/// the final one, as Triton's warmup does.
fn errors_of(answer: Answer) -> Vec<String> {
    match answer {
        Answer::Single(mut receiver) => match receiver.try_recv() {
            Ok(Ok(_)) => Vec::new(),
            Ok(Err(e)) => vec![e.message().to_string()],
            Err(_) => vec!["the instance returned no response".to_string()],
        },
        Answer::Streamed(mut stream) => {
            let mut errors = Vec::new();
            while let Some(message) = futures::executor::block_on(stream.recv()) {
                if let Some(Err(e)) = message.result {
                    errors.push(e.message().to_string());
                }
                if message.last {
                    break;
                }
            }
            errors
        }
    }
}
