//! A loaded, servable model version: its spec, statistics and scheduler. Requests hold an
//! `Arc` of it, so an unload or reload never cuts off a request in flight.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::cache::key::CacheKey;
use crate::cache::{Outcome, ResponseCache};
use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::{select_outputs, InferRequest, InferResponse};
use crate::scheduler::{Job, Reply, Scheduler};
use crate::stats::{FailureReason, ModelStats, ModelStatsSnapshot};
use crate::validate::validate_request;

/// The answer to a submitted request, still to come.
pub type Answer =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<InferResponse>> + Send>>;

/// One ready model version.
pub struct LoadedModel {
    spec: Arc<ModelSpec>,
    stats: Arc<ModelStats>,
    scheduler: Box<dyn Scheduler>,
    /// The server's response cache, when this model uses it.
    cache: Option<Arc<ResponseCache>>,
}

impl LoadedModel {
    /// Assembles a loaded model from its parts.
    pub fn new(
        spec: Arc<ModelSpec>,
        stats: Arc<ModelStats>,
        scheduler: Box<dyn Scheduler>,
        cache: Option<Arc<ResponseCache>>,
    ) -> Self {
        Self {
            spec,
            stats,
            scheduler,
            cache,
        }
    }

    /// Whether requests to this model go through the response cache.
    pub fn uses_cache(&self) -> bool {
        self.cache.is_some()
    }

    /// The model's spec.
    pub fn spec(&self) -> &Arc<ModelSpec> {
        &self.spec
    }

    /// The model's live statistics.
    pub fn stats(&self) -> &ModelStats {
        &self.stats
    }

    /// A reading of the statistics, labelled with the model's name and version.
    pub fn snapshot(&self) -> ModelStatsSnapshot {
        let mut snapshot = self.stats.snapshot(&self.spec.name, self.spec.version);
        snapshot.cache_enabled = self.cache.is_some();
        snapshot
    }

    /// Admits one request now (validation, and the scheduler's queue unless the model
    /// uses the response cache) and returns the future of its answer. Requests submitted
    /// one after another are queued in that order, which a gRPC stream of sequence
    /// requests relies on.
    pub fn submit(self: Arc<Self>, request: InferRequest, received_at: Instant) -> Answer {
        // Like Triton, a request rejected by validation counts neither as a success nor
        // as a failure of the model.
        let batch_size = match validate_request(&self.spec, &request) {
            Ok(size) => size,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        if let Some(cache) = self.cache.clone() {
            return Box::pin(async move {
                self.infer_cached(&cache, request, batch_size, received_at)
                    .await
            });
        }
        match self.enqueue(request, batch_size, received_at) {
            Ok(answer) => Box::pin(async move { self.answer(answer).await }),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    /// The cache stores every output; the request's own selection is applied afterwards,
    /// so a request for any subset of outputs can be answered from the same entry.
    async fn infer_cached(
        &self,
        cache: &ResponseCache,
        mut request: InferRequest,
        batch_size: usize,
        received_at: Instant,
    ) -> Result<InferResponse> {
        let wanted = request.requested_outputs.take();
        let id = request.id.clone();
        let key = CacheKey::of(&self.spec.name, self.spec.version, &request);
        let compute = || async move {
            let response = self.schedule(request, batch_size, received_at).await?;
            Ok(Arc::new(response.outputs))
        };
        let (outputs, outcome) = cache.get_or_compute(key, compute).await;
        match outcome {
            Outcome::Hit { lookup } => self.stats.cache_hit(received_at.elapsed(), lookup),
            Outcome::Miss { lookup_and_insert } => self.stats.cache_miss(lookup_and_insert),
            Outcome::Uncached => {}
        }
        let outputs = select_outputs((*outputs?).clone(), wanted.as_deref(), &self.spec.name)?;
        Ok(InferResponse {
            model_name: self.spec.name.clone(),
            model_version: self.spec.version,
            id,
            parameters: Vec::new(),
            outputs,
        })
    }

    /// Hands one validated request to the scheduler and awaits its answer.
    async fn schedule(
        &self,
        request: InferRequest,
        batch_size: usize,
        received_at: Instant,
    ) -> Result<InferResponse> {
        let answer = self.enqueue(request, batch_size, received_at)?;
        self.answer(answer).await
    }

    /// Queues one validated request; the receiver gets its answer.
    fn enqueue(
        &self,
        request: InferRequest,
        batch_size: usize,
        received_at: Instant,
    ) -> Result<oneshot::Receiver<Result<InferResponse>>> {
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
            padding: false,
            on_outputs: None,
        };
        self.stats.request_started();
        if let Err(e) = self.scheduler.enqueue(job) {
            self.stats
                .request_failed(received_at.elapsed(), FailureReason::Rejected, true);
            return Err(e);
        }
        Ok(answer)
    }

    /// Awaits a queued request's answer.
    async fn answer(
        &self,
        answer: oneshot::Receiver<Result<InferResponse>>,
    ) -> Result<InferResponse> {
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
