//! A loaded, servable model version: its spec, statistics and scheduler (or, for an
//! ensemble, its steps). Requests hold an `Arc` of it, so an unload or reload never cuts
//! off a request in flight.
//!
//! [`LoadedModel::submit`] is the facade's one path, in this order: validate, start the
//! request's trace, then the [`cached`] lookup when the model uses the response cache,
//! else execution — queued to the scheduler here, or [`ensembled`] steps — and the first
//! response observed for the metrics. [`decoupled`] models answer with a stream instead;
//! [`traced`] holds what the trace records on the way.

mod cached;
mod decoupled;
mod ensembled;
mod traced;

use self::traced::trace_queued;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::cache::ResponseCache;
use crate::config::{ModelConfig, PublishedConfig};
use crate::ensemble::graph::Plan;
use crate::ensemble::{Ensemble, StepModel};
use crate::error::{Error, Result};
use crate::metrics::ModelMetrics;
use crate::model::ModelSpec;
use crate::output_query::without_lending;
use crate::presence::CallerPresence;
use crate::request::{refused, Answer, InferRequest, InferResponse, Outputs};
use crate::response_stream::{ResponseSender, ResponseStream, RESPONSES_BUFFERED};
use crate::scheduler::{InstanceSet, Job, PassiveInstances, Reply, Scheduler};
use crate::stats::{
    FailureReason, FirstResponse, ModelStats, ModelStatsSnapshot, RequestRecord, StepTimes,
};
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
    /// The passive groups' instances, shared like the runner; declared before it so that
    /// they are finalized before the scheduler's instances and the model.
    passive: Arc<PassiveInstances>,
    /// Shared by the versions an instance update makes of this one.
    runner: Arc<Runner>,
    /// The instances, when a reload may change them in place (not for ensembles).
    instances: Option<Arc<InstanceSet>>,
    /// The server's response cache, when this model uses it.
    cache: Option<Arc<ResponseCache>>,
    /// How long loading this version took (`nv_model_load_duration_secs`).
    load_duration: Duration,
    /// Whether the backend reads inputs in GPU memory (see [`Self::with_gpu_inputs`]).
    backend_reads_gpu: bool,
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
            passive: Arc::default(),
            runner: Arc::new(Runner::Scheduled(scheduler)),
            instances: None,
            cache,
            load_duration: Duration::ZERO,
            backend_reads_gpu: false,
        }
    }

    /// The model, whose backend reads inputs in GPU memory when `reads_gpu`.
    pub fn with_gpu_inputs(mut self, reads_gpu: bool) -> Self {
        self.backend_reads_gpu = reads_gpu;
        self
    }

    /// Whether CUDA shared-memory inputs stay on their GPU for this model, as Triton
    /// hands a GPU backend the region's device memory: its backend reads GPU memory,
    /// every instance is on a GPU, and nothing on the way needs the bytes (no response
    /// cache, no sequence batcher).
    fn keeps_gpu_inputs(&self) -> bool {
        self.backend_reads_gpu
            && self.cache.is_none()
            && !matches!(
                self.spec.scheduling,
                crate::model::SchedulingSpec::Sequence(_)
            )
            && !self.spec.instance_groups.is_empty()
            && self.spec.instance_groups.iter().all(|g| {
                g.devices
                    .iter()
                    .all(|d| matches!(d, crate::model::InstanceKind::Gpu(_)))
            })
    }

    /// Copies to the host the inputs that came in a CUDA region and that this model does
    /// not read there: all of them unless [`Self::keeps_gpu_inputs`], and `BYTES`
    /// tensors always (their elements are checked on the host). A model with a response
    /// cache has no outputs written in the client's regions: the cache keeps them.
    pub(crate) fn place_tensors(&self, request: &mut InferRequest) -> Result<()> {
        if self.cache.is_some() {
            request.output_query = request.output_query.take().map(without_lending);
        }
        if request.inputs.iter().all(|i| i.device.is_none()) {
            return Ok(());
        }
        let keep = self.keeps_gpu_inputs();
        for input in &mut request.inputs {
            if !keep || input.datatype == nereid_proto::DataType::Bytes {
                input.to_host()?;
            }
        }
        Ok(())
    }

    /// The model, recording that its load took `load_duration`.
    pub fn with_load_duration(mut self, load_duration: Duration) -> Self {
        self.load_duration = load_duration;
        self
    }

    /// The model, whose instances `instances` can change while it serves.
    pub fn with_instance_set(mut self, instances: Option<InstanceSet>) -> Self {
        self.instances = instances.map(Arc::new);
        self
    }

    /// The model holding its passive groups' instances until it unloads.
    pub fn with_passive_instances(mut self, passive: PassiveInstances) -> Self {
        self.passive = Arc::new(passive);
        self
    }

    /// Whether a reload that changes only the instance groups can keep this version
    /// serving and change its instances in place ([`Self::with_instance_groups`]).
    pub fn updates_instances(&self) -> bool {
        self.instances.is_some()
    }

    /// This version serving `config`, which differs from its own only in its instance
    /// groups (normalized): the instances of unchanged groups are kept, the others
    /// created or retired, and the queue, statistics and cache carry over (Triton's
    /// instance update). On an error the instances are as they were.
    pub fn with_instance_groups(&self, config: ModelConfig) -> Result<Self> {
        let instances = self.instances.as_ref().ok_or_else(|| {
            Error::internal(format!(
                "the instances of model '{}' cannot change while it serves",
                self.spec.name
            ))
        })?;
        let mut spec = ModelSpec::new(config.clone(), self.spec.version)?;
        spec.labels = self.spec.labels.clone();
        instances.update(&spec)?;
        Ok(Self {
            spec: Arc::new(spec),
            config: Arc::new(PublishedConfig::new(config)),
            stats: self.stats.clone(),
            passive: self.passive.clone(),
            runner: self.runner.clone(),
            instances: self.instances.clone(),
            cache: self.cache.clone(),
            load_duration: self.load_duration,
            backend_reads_gpu: self.backend_reads_gpu,
        })
    }

    /// Whether `other` is this version after an instance update (or this version
    /// itself): stopping one would stop the other.
    pub fn shares_runner(&self, other: &LoadedModel) -> bool {
        Arc::ptr_eq(&self.runner, &other.runner)
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
            passive: Arc::default(),
            runner: Arc::new(Runner::Ensemble(ensemble)),
            instances: None,
            cache,
            load_duration: Duration::ZERO,
            backend_reads_gpu: false,
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

    /// [`Self::submit`], telling a refusal before the request was issued (validation, a
    /// full queue) from the answer of an issued one, which may come at once too: a gRPC
    /// stream that ends on errors answers refusals in-stream, as Triton does.
    pub fn admit(self: Arc<Self>, request: InferRequest, received_at: Instant) -> Result<Answer> {
        self.admit_in(request, received_at, None)
    }

    /// [`Self::submit`], for a step of an ensemble request when `step_times` is given: on
    /// success the step's queue and compute times are also added to the ensemble's sums.
    fn submit_in(
        self: Arc<Self>,
        request: InferRequest,
        received_at: Instant,
        step_times: Option<Arc<StepTimes>>,
    ) -> Answer {
        self.admit_in(request, received_at, step_times)
            .unwrap_or_else(refused)
    }

    /// [`Self::admit`], with [`Self::submit_in`]'s `step_times`.
    fn admit_in(
        self: Arc<Self>,
        mut request: InferRequest,
        received_at: Instant,
        step_times: Option<Arc<StepTimes>>,
    ) -> Result<Answer> {
        self.place_tensors(&mut request)?;
        // Like Triton, a request rejected by validation counts neither as a success nor
        // as a failure of the model.
        let batch_size = validate_request(&self.spec, &request)?;
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
        let answer: Answer = match self.cache.clone() {
            Some(cache) => {
                Box::pin(async move { self.infer_cached(&cache, request, admitted).await })
            }
            None => self.start(request, admitted)?,
        };
        if trace.is_none() && first_response.is_none() {
            return Ok(answer);
        }
        Ok(Box::pin(async move {
            let result = answer.await;
            if let Some(first_response) = first_response {
                first_response.responded();
            }
            if let Some(trace) = trace {
                trace.timestamp("REQUEST_END", Instant::now());
            }
            result
        }))
    }

    /// Starts executing one validated request: queued to the scheduler now, or, for an
    /// ensemble, its first steps submitted now. Fails when the scheduler refuses it.
    fn start(self: &Arc<Self>, request: InferRequest, admitted: Admitted) -> Result<Answer> {
        let scheduler = match self.runner.as_ref() {
            Runner::Scheduled(scheduler) => scheduler,
            Runner::Ensemble(ensemble) => {
                return Ok(self.start_ensemble(ensemble, request, admitted))
            }
        };
        let presence = CallerPresence::default();
        let answer = self.enqueue(scheduler.as_ref(), request, admitted, None, Some(&presence))?;
        let this = self.clone();
        // Moved into the future: dropping it unanswered marks the caller gone.
        let guard = presence.guard();
        Ok(Box::pin(async move {
            let result = this.answer(answer).await;
            guard.answered();
            result
        }))
    }

    fn response(&self, id: String, outputs: Outputs) -> InferResponse {
        InferResponse {
            model_name: self.spec.name.clone(),
            model_version: self.spec.version,
            id,
            parameters: Vec::new(),
            outputs,
        }
    }

    /// Queues one validated request; the receiver gets its answer (or, for a decoupled
    /// model's request, `stream` gets its responses). `presence` lets the backend see
    /// while the request runs whether its caller left (a stream knows that itself).
    fn enqueue(
        &self,
        scheduler: &dyn Scheduler,
        request: InferRequest,
        admitted: Admitted,
        stream: Option<ResponseSender>,
        presence: Option<&CallerPresence>,
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
            reply: match presence {
                Some(presence) => Reply::watched(reply, presence.clone()),
                None => Reply::new(reply),
            },
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
            on_iteration: None,
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
        if let Runner::Scheduled(scheduler) = self.runner.as_ref() {
            scheduler.stop();
        }
    }
}

impl StepModel for LoadedModel {
    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn ensemble_plan(&self) -> Option<&Plan> {
        match self.runner.as_ref() {
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

    fn submit_step_stream(
        self: Arc<Self>,
        request: InferRequest,
        received_at: Instant,
    ) -> Result<ResponseStream> {
        self.submit_stream(request, received_at, RESPONSES_BUFFERED)
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
mod tests;
