//! A loaded, servable model version: its spec, statistics and scheduler (or, for an
//! ensemble, its steps). Requests hold an `Arc` of it, so an unload or reload never cuts
//! off a request in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::cache::key::CacheKey;
use crate::cache::{Outcome, ResponseCache};
use crate::config::PublishedConfig;
use crate::ensemble::graph::Plan;
use crate::ensemble::{Ensemble, StepModel};
use crate::error::{Error, Result};
use crate::metrics::ModelMetrics;
use crate::model::ModelSpec;
use crate::request::{
    select_outputs, trace_outputs, Answer, InferRequest, InferResponse, OutputTensor,
};
use crate::response_stream::{ResponseSender, ResponseStream};
use crate::scheduler::{Job, Reply, Scheduler};
use crate::stats::{
    FailureReason, FirstResponse, ModelStats, ModelStatsSnapshot, RequestRecord, StepTimes,
};
use crate::trace::{RequestTrace, TensorActivity};
use crate::validate::validate_request;

/// How a model version executes what it admits.
enum Runner {
    /// Through a scheduler to the backend's instances.
    Scheduled(Box<dyn Scheduler>),
    /// As an ensemble of steps on other models.
    Ensemble(Ensemble),
}

/// One ready model version.
pub struct LoadedModel {
    spec: Arc<ModelSpec>,
    /// Only for the configuration endpoints.
    config: Arc<PublishedConfig>,
    stats: Arc<ModelStats>,
    runner: Runner,
    /// The server's response cache, when this model uses it.
    cache: Option<Arc<ResponseCache>>,
    /// How long loading this version took (`nv_model_load_duration_secs`).
    load_duration: Duration,
}

impl LoadedModel {
    /// Assembles a loaded model from its parts.
    pub fn new(
        spec: Arc<ModelSpec>,
        config: Arc<PublishedConfig>,
        stats: Arc<ModelStats>,
        scheduler: Box<dyn Scheduler>,
        cache: Option<Arc<ResponseCache>>,
    ) -> Self {
        Self {
            spec,
            config,
            stats,
            runner: Runner::Scheduled(scheduler),
            cache,
            load_duration: Duration::ZERO,
        }
    }

    /// The model, recording that its load took `load_duration`.
    pub fn with_load_duration(mut self, load_duration: Duration) -> Self {
        self.load_duration = load_duration;
        self
    }

    /// A loaded ensemble version.
    pub fn ensemble(
        spec: Arc<ModelSpec>,
        config: Arc<PublishedConfig>,
        ensemble: Ensemble,
        stats: Arc<ModelStats>,
        cache: Option<Arc<ResponseCache>>,
    ) -> Self {
        Self {
            spec,
            config,
            stats,
            runner: Runner::Ensemble(ensemble),
            cache,
            load_duration: Duration::ZERO,
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

    /// The normalized configuration, as the configuration endpoints answer it.
    pub fn config(&self) -> &Arc<PublishedConfig> {
        &self.config
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

    /// Everything the metrics endpoint exports for this version: its statistics, its
    /// latency summaries and how long it took to load.
    pub fn metrics(&self) -> ModelMetrics {
        ModelMetrics {
            stats: self.snapshot(),
            latency: self.stats.latency_metrics(),
            load_duration: self.load_duration,
        }
    }

    /// Admits one request now (validation, and the scheduler's queue unless the model
    /// uses the response cache) and returns the future of its answer. Requests submitted
    /// one after another are queued in that order, which a gRPC stream of sequence
    /// requests relies on.
    pub fn submit(self: Arc<Self>, request: InferRequest, received_at: Instant) -> Answer {
        self.submit_in(request, received_at, None)
    }

    /// [`Self::submit`], for a step of an ensemble request when `step_times` is given: on
    /// success the step's queue and compute times are also added to the ensemble's sums.
    fn submit_in(
        self: Arc<Self>,
        request: InferRequest,
        received_at: Instant,
        step_times: Option<Arc<StepTimes>>,
    ) -> Answer {
        // Like Triton, a request rejected by validation counts neither as a success nor
        // as a failure of the model.
        let batch_size = match validate_request(&self.spec, &request) {
            Ok(size) => size,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let admitted = Admitted {
            batch_size,
            received_at,
            step_times,
            queue_traced: false,
        };
        let trace = request.trace.clone();
        if let Some(trace) = &trace {
            trace.request_start(&self.spec.name, self.spec.version, &request.id, received_at);
        }
        // Triton observes the one response of an admitted request as it is sent: an
        // answer from the backend, the cache or an ensemble, or an error such as an
        // expired timeout.
        let first_response = FirstResponse::of(&self.stats, received_at);
        let answer = match self.cache.clone() {
            Some(cache) => {
                Box::pin(async move { self.infer_cached(&cache, request, admitted).await })
            }
            None => self.start(request, admitted),
        };
        if trace.is_none() && first_response.is_none() {
            return answer;
        }
        Box::pin(async move {
            let result = answer.await;
            if let Some(first_response) = first_response {
                first_response.responded();
            }
            if let Some(trace) = trace {
                trace.timestamp("REQUEST_END", Instant::now());
            }
            result
        })
    }

    /// The cache stores every output; the request's own selection is applied afterwards,
    /// so a request for any subset of outputs can be answered from the same entry.
    ///
    /// Traced as Triton's schedulers do (core `DynamicBatchScheduler::Enqueue`): the
    /// request is queued (`QUEUE_START`, its inputs) before the lookup, once whether it
    /// hits or not, and a hit's response records its outputs as the one a backend sends.
    async fn infer_cached(
        self: &Arc<Self>,
        cache: &ResponseCache,
        mut request: InferRequest,
        mut admitted: Admitted,
    ) -> Result<InferResponse> {
        let wanted = request.requested_outputs.take();
        let id = request.id.clone();
        let received_at = admitted.received_at;
        let trace = request.trace.clone();
        if let Some(trace) = &trace {
            trace_queued(trace, &request, Instant::now());
            admitted.queue_traced = true;
        }
        let key = CacheKey::of(&self.spec.name, self.spec.version, &request);
        let compute = || async move {
            let response = self.start(request, admitted).await?;
            Ok(Arc::new(response.outputs))
        };
        let (outputs, outcome) = cache.get_or_compute(key, compute).await;
        match outcome {
            Outcome::Hit { lookup } => self.stats.cache_hit(received_at.elapsed(), lookup),
            Outcome::Miss { lookup_and_insert } => self.stats.cache_miss(lookup_and_insert),
            Outcome::Uncached => {}
        }
        let hit = matches!(outcome, Outcome::Hit { .. });
        let outputs = select_outputs((*outputs?).clone(), wanted.as_deref(), &self.spec.name)?;
        if let (true, Some(trace)) = (hit, &trace) {
            trace_outputs(trace, &outputs);
        }
        Ok(self.response(id, outputs))
    }

    /// Starts executing one validated request: queued to the scheduler now, or, for an
    /// ensemble, its first steps submitted now.
    fn start(self: &Arc<Self>, request: InferRequest, admitted: Admitted) -> Answer {
        let scheduler = match &self.runner {
            Runner::Scheduled(scheduler) => scheduler,
            Runner::Ensemble(ensemble) => return self.start_ensemble(ensemble, request, admitted),
        };
        match self.enqueue(scheduler.as_ref(), request, admitted, None) {
            Ok(answer) => {
                let this = self.clone();
                Box::pin(async move { this.answer(answer).await })
            }
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    /// Runs an ensemble request and records it as Triton does: one execution of the
    /// request's batch size whose queue and compute times are the sums over its steps.
    fn start_ensemble(
        self: &Arc<Self>,
        ensemble: &Ensemble,
        mut request: InferRequest,
        admitted: Admitted,
    ) -> Answer {
        let wanted = request.requested_outputs.take();
        let id = request.id.clone();
        let times = Arc::new(StepTimes::default());
        // A caller that goes away before the steps finish drops the record: cancelled.
        let mut record = RequestRecord::open(
            self.stats.clone(),
            admitted.received_at,
            admitted.step_times,
            FailureReason::Canceled,
        );
        // Its steps start now; each is pending in its own model's queue.
        record.executing();
        // The ensemble's own `reshape`s: its steps see the inputs in their reshape
        // layout, and its outputs, produced in theirs, go back to the client in `dims`.
        self.spec.reshape_inputs(&mut request.inputs);
        if let (false, Some(trace)) = (admitted.queue_traced, &request.trace) {
            trace.timestamp("QUEUE_START", Instant::now());
        }
        let run = ensemble.start(request, times.clone());
        let this = self.clone();
        Box::pin(async move {
            let outputs = run
                .finish()
                .await
                .and_then(|mut outputs| this.spec.reshape_outputs(&mut outputs).map(|()| outputs));
            let outputs = match outputs {
                Ok(outputs) => outputs,
                Err(e) => {
                    record.failed(FailureReason::Other);
                    return Err(e);
                }
            };
            let (queue, timing) = times.totals();
            this.stats
                .execution_finished(admitted.batch_size, admitted.batch_size, timing);
            record.succeeded(queue, timing);
            let outputs = select_outputs(outputs, wanted.as_deref(), &this.spec.name)?;
            Ok(this.response(id, outputs))
        })
    }

    fn response(&self, id: String, outputs: Vec<OutputTensor>) -> InferResponse {
        InferResponse {
            model_name: self.spec.name.clone(),
            model_version: self.spec.version,
            id,
            parameters: Vec::new(),
            outputs,
        }
    }

    /// Admits one request of a decoupled model now and returns the stream of its
    /// answers: any number of responses, the last one (or a final flag alone) marked.
    pub fn submit_stream(
        self: Arc<Self>,
        request: InferRequest,
        received_at: Instant,
    ) -> Result<ResponseStream> {
        let Runner::Scheduled(scheduler) = &self.runner else {
            return Err(Error::internal(format!(
                "model '{}' is an ensemble, which cannot be decoupled",
                self.spec.name
            )));
        };
        let batch_size = validate_request(&self.spec, &request)?;
        let spec = self.spec.clone();
        let id = request.id.clone();
        let wanted = request.requested_outputs.clone();
        let trace = request.trace.clone();
        if let Some(trace) = &trace {
            trace.request_start(&spec.name, spec.version, &id, received_at);
        }
        let (sender, stream) = ResponseSender::channel(Box::new(move |outputs| {
            // Each response records its outputs as it is sent (core `InferenceResponse::Send`).
            if let Some(trace) = &trace {
                trace_outputs(trace, &outputs);
            }
            let mut outputs = select_outputs(outputs, wanted.as_deref(), &spec.name)?;
            spec.reshape_outputs(&mut outputs)?;
            Ok(InferResponse {
                model_name: spec.name.clone(),
                model_version: spec.version,
                id: id.clone(),
                parameters: Vec::new(),
                outputs,
            })
        }));
        let sender = sender.observing(FirstResponse::of(&self.stats, received_at));
        let admitted = Admitted {
            batch_size,
            received_at,
            step_times: None,
            queue_traced: false,
        };
        self.enqueue(scheduler.as_ref(), request, admitted, Some(sender))?;
        Ok(stream)
    }

    /// Queues one validated request; the receiver gets its answer (or, for a decoupled
    /// model's request, `stream` gets its responses).
    fn enqueue(
        &self,
        scheduler: &dyn Scheduler,
        request: InferRequest,
        admitted: Admitted,
        stream: Option<ResponseSender>,
    ) -> Result<oneshot::Receiver<Result<InferResponse>>> {
        let span = tracing::debug_span!(
            "infer",
            model = %self.spec.name,
            version = self.spec.version,
            id = %request.id
        );
        let (reply, answer) = oneshot::channel();
        let enqueued_at = crate::scheduler::now();
        if let (false, Some(trace)) = (admitted.queue_traced, &request.trace) {
            trace_queued(trace, &request, enqueued_at);
        }
        let job = Job {
            request,
            batch_size: admitted.batch_size,
            reply: Reply::new(reply),
            record: RequestRecord::open(
                self.stats.clone(),
                admitted.received_at,
                admitted.step_times,
                FailureReason::Rejected,
            ),
            enqueued_at,
            span,
            padding: false,
            on_outputs: None,
            stream,
        };
        // A refused job is dropped by the scheduler, and its record counts it as rejected.
        scheduler.enqueue(job)?;
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
        if let Runner::Scheduled(scheduler) = &self.runner {
            scheduler.stop();
        }
    }
}

impl StepModel for LoadedModel {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn ensemble_plan(&self) -> Option<&Plan> {
        match &self.runner {
            Runner::Ensemble(e) => Some(e.plan()),
            Runner::Scheduled(_) => None,
        }
    }

    fn submit_step(
        self: Arc<Self>,
        request: InferRequest,
        received_at: Instant,
        times: Arc<StepTimes>,
    ) -> Answer {
        self.submit_in(request, received_at, Some(times))
    }
}

/// A queued request's `QUEUE_START` and, at the `TENSORS` level, its inputs.
fn trace_queued(trace: &RequestTrace, request: &InferRequest, at: Instant) {
    trace.timestamp("QUEUE_START", at);
    if trace.traces_tensors() {
        for input in &request.inputs {
            let activity = TensorActivity::QueueInput;
            trace.tensor(
                activity,
                &input.name,
                input.datatype,
                &input.shape,
                &input.data,
            );
        }
    }
}

/// What admission established about a request.
struct Admitted {
    batch_size: usize,
    received_at: Instant,
    step_times: Option<Arc<StepTimes>>,
    /// Whether its `QUEUE_START` is already recorded (before a cache lookup), so a miss
    /// going on to the queue does not record it again.
    queue_traced: bool,
}

#[cfg(test)]
#[path = "loaded_tests.rs"]
mod tests;
