//! A loaded, servable model version: its spec, statistics and scheduler. Requests hold an
//! `Arc` of it, so an unload or reload never cuts off a request in flight.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::{InferRequest, InferResponse};
use crate::scheduler::{Job, Reply, Scheduler};
use crate::stats::{FailureReason, ModelStats};
use crate::validate::validate_request;

/// One ready model version.
pub struct LoadedModel {
    spec: Arc<ModelSpec>,
    stats: Arc<ModelStats>,
    scheduler: Box<dyn Scheduler>,
}

impl LoadedModel {
    /// Assembles a loaded model from its parts.
    pub fn new(
        spec: Arc<ModelSpec>,
        stats: Arc<ModelStats>,
        scheduler: Box<dyn Scheduler>,
    ) -> Self {
        Self {
            spec,
            stats,
            scheduler,
        }
    }

    /// The model's spec.
    pub fn spec(&self) -> &Arc<ModelSpec> {
        &self.spec
    }

    /// The model's live statistics.
    pub fn stats(&self) -> &ModelStats {
        &self.stats
    }

    /// Validates, schedules and awaits one request.
    pub async fn infer(
        &self,
        request: InferRequest,
        received_at: Instant,
    ) -> Result<InferResponse> {
        // Like Triton, a request rejected by validation counts neither as a success nor
        // as a failure of the model.
        let batch_size = validate_request(&self.spec, &request)?;
        let span = tracing::debug_span!(
            "infer",
            model = %self.spec.name,
            version = self.spec.version,
            id = %request.id
        );
        let (reply, answer) = oneshot::channel();
        let job = Job {
            request,
            batch_size,
            reply: Reply::new(reply),
            received_at,
            enqueued_at: Instant::now(),
            span,
        };
        self.stats.request_started();
        if let Err(e) = self.scheduler.enqueue(job) {
            self.stats
                .request_failed(received_at.elapsed(), FailureReason::Rejected, true);
            return Err(e);
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::internal(format!(
                "model '{}' stopped before answering the request",
                self.spec.name
            )))
        })
    }

    /// Stops the scheduler and waits for queued work to finish. Blocking.
    pub fn stop(&self) {
        self.scheduler.stop();
    }
}
