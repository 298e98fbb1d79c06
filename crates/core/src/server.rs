//! The core facade: the one call per protocol operation that both frontends make, so HTTP
//! and gRPC cannot drift apart.

mod admin;
mod shm;
pub use admin::IndexDocument;

use std::sync::Arc;
use std::time::Instant;

use crate::classification::classify_response;
use crate::config::PublishedConfig;
use crate::error::{Error, Result};
use crate::log_settings::{LogControl, LogSettings, SettingValue};
use crate::model::ModelSpec;
use crate::repository::ModelRepository;
use crate::request::{refused, Answer, Classifications, InferRequest, InferResponse};
use crate::response_stream::{ResponseStream, StreamedResponse, RESPONSES_BUFFERED};
use crate::stats::ModelStatsSnapshot;
use nereid_proto::DataType;

/// Protocol extensions that always work in this build; [`Server::extensions`] adds those
/// that depend on how the server was started.
pub const EXTENSIONS: &[&str] = &[
    "classification",
    "system_shared_memory",
    "cuda_shared_memory",
    "model_repository",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "sequence",
];

/// Server identity, for server metadata.
#[derive(Debug, Clone)]
pub struct ServerIdentity {
    /// `--id`.
    pub name: String,
    /// Nereid's version.
    pub version: String,
}

/// A tensor as model metadata lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorMetadata {
    /// Name.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Shape with -1 for variable dimensions (and the batch dimension).
    pub shape: Vec<i64>,
}

/// Model metadata (`GET /v2/models/{m}`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMetadata {
    /// Model name.
    pub name: String,
    /// Ready versions, ascending.
    pub versions: Vec<String>,
    /// Platform (or backend name).
    pub platform: String,
    /// Inputs.
    pub inputs: Vec<TensorMetadata>,
    /// Outputs.
    pub outputs: Vec<TensorMetadata>,
}

/// The model version one inference request goes to, from [`Server::infer_target`]: the
/// lookup a frontend makes to refuse a decoupled model before reading the body is the
/// one the request is then submitted to, not repeated. Holds the lookup's error when the
/// model is not there, for the submit to report.
pub struct InferTarget(Result<Arc<crate::loaded::LoadedModel>>);

/// The inference server as frontends see it.
pub struct Server {
    identity: ServerIdentity,
    repository: Arc<ModelRepository>,
    strict_readiness: bool,
    shm: crate::shm::ShmRegistry,
    trace: crate::trace::TraceManager,
    /// `true` once shutdown has begun; long-lived calls (streams) watch it.
    stopping: tokio::sync::watch::Sender<bool>,
    /// The process's log settings, when the process lets clients change them.
    log_control: Option<Arc<LogControl>>,
    /// `false` when start-up failed and the process serves on anyway
    /// (`--exit-on-error=false`): the server is then neither live nor ready.
    initialized: bool,
}

impl Server {
    /// A server over `repository`. With `strict_readiness` (Triton's default) the server is
    /// ready only while every model it was asked to load is ready.
    pub fn new(
        identity: ServerIdentity,
        repository: Arc<ModelRepository>,
        strict_readiness: bool,
    ) -> Self {
        Self {
            identity,
            repository,
            strict_readiness,
            shm: crate::shm::ShmRegistry::default(),
            trace: crate::trace::TraceManager::disabled(),
            stopping: tokio::sync::watch::Sender::new(false),
            log_control: None,
            initialized: true,
        }
    }

    /// Marks the server as failed to initialize (Triton's `SERVER_FAILED_TO_INITIALIZE`):
    /// it answers metadata and the like but is neither live nor ready.
    pub fn failed_to_initialize(mut self) -> Self {
        self.initialized = false;
        self
    }

    /// Lets the logging extension read and change the process's log settings through
    /// `control` (before serving). Without it the extension answers Triton's "the server
    /// does not support dynamic logging", as a Triton built without logging does.
    pub fn with_log_control(mut self, control: Arc<LogControl>) -> Self {
        self.log_control = Some(control);
        self
    }

    /// The protocol extensions this server supports, for server metadata.
    pub fn extensions(&self) -> Vec<&'static str> {
        let mut extensions = EXTENSIONS.to_vec();
        if self.log_control.is_some() {
            extensions.push("logging");
        }
        extensions
    }

    /// The log settings in force (the logging extension).
    pub fn log_settings(&self) -> Result<LogSettings> {
        Ok(self.log_control()?.settings())
    }

    /// Changes the named log settings, all or none, and returns the settings then in
    /// force (the logging extension).
    pub fn update_log_settings(&self, changes: &[(String, SettingValue)]) -> Result<LogSettings> {
        self.log_control()?.update(changes)
    }

    fn log_control(&self) -> Result<&LogControl> {
        self.log_control
            .as_deref()
            .ok_or_else(|| Error::unavailable("the server does not support dynamic logging"))
    }

    /// Sets how much shared memory clients may register (before serving starts).
    pub fn with_shm_limits(mut self, limits: crate::shm::ShmLimits) -> Self {
        self.shm = crate::shm::ShmRegistry::with_limits(limits);
        self
    }

    /// Sets the trace settings and sampling (before serving starts).
    pub fn with_trace(mut self, trace: crate::trace::TraceManager) -> Self {
        self.trace = trace;
        self
    }

    /// The trace extension: frontends sample requests with it ([`TraceManager::sample`])
    /// and the owner flushes it at shutdown.
    ///
    /// [`TraceManager::sample`]: crate::trace::TraceManager::sample
    pub fn trace(&self) -> &crate::trace::TraceManager {
        &self.trace
    }

    /// The trace settings of `model` (its own where it has them, else the global ones),
    /// or the global ones, after applying `update` when there is one. Triton's refusal
    /// for a model that is not ready comes first.
    pub fn trace_settings(
        &self,
        model: Option<&str>,
        update: Option<&[(String, crate::trace::SettingValue)]>,
    ) -> Result<crate::trace::TraceSettingsView> {
        if let Some(model) = model {
            if self.repository.ready_versions(model).is_empty() {
                return Err(Error::invalid_arg(format!(
                    "Request for unknown model : {model}"
                )));
            }
        }
        if let Some(update) = update {
            self.trace.update(model, update)?;
        }
        Ok(self.trace.settings(model))
    }

    /// The shared-memory regions, for the frontends to resolve tensors in them at the
    /// edge (the extension's calls are the `shm_*` methods).
    pub fn shm(&self) -> &crate::shm::ShmRegistry {
        &self.shm
    }

    /// The model repository, for the process that owns the server (polling, stopping
    /// the models); frontends use the facade's calls instead.
    pub fn repository(&self) -> &Arc<ModelRepository> {
        &self.repository
    }

    /// Liveness: true until shutdown completes, unless start-up failed.
    pub fn is_live(&self) -> bool {
        self.initialized
    }

    /// Readiness: initialized, not stopping and (with strict readiness) every requested
    /// model ready.
    pub fn is_ready(&self) -> bool {
        self.initialized
            && !*self.stopping.borrow()
            && (!self.strict_readiness || self.repository.all_ready())
    }

    /// Marks the server as stopping: readiness turns false and [`Self::stopped`] resolves.
    pub fn begin_shutdown(&self) {
        self.stopping.send_replace(true);
    }

    /// Resolves once shutdown has begun, so streams can stop taking new requests.
    pub async fn stopped(&self) {
        let mut receiver = self.stopping.subscribe();
        // An error means the sender is gone, which only happens when the server is dropped.
        let _ = receiver.wait_for(|stopping| *stopping).await;
    }

    /// Name, version and extensions.
    pub fn identity(&self) -> &ServerIdentity {
        &self.identity
    }

    /// The spec of a ready model version.
    pub fn model_spec(&self, name: &str, version: Option<i64>) -> Result<Arc<ModelSpec>> {
        Ok(self.repository.get(name, version)?.spec().clone())
    }

    /// The normalized configuration of a ready model version (the model configuration
    /// extension).
    pub fn model_config(&self, name: &str, version: Option<i64>) -> Result<Arc<PublishedConfig>> {
        Ok(self.repository.get(name, version)?.config().clone())
    }

    /// Whether the model version is ready.
    pub fn model_ready(&self, name: &str, version: Option<i64>) -> bool {
        self.repository.get(name, version).is_ok()
    }

    /// Model metadata.
    pub fn model_metadata(&self, name: &str, version: Option<i64>) -> Result<ModelMetadata> {
        let spec = self.model_spec(name, version)?;
        let versions = self
            .repository
            .ready_versions(name)
            .iter()
            .map(i64::to_string)
            .collect();
        let tensors = |list: &[crate::model::TensorSpec]| {
            list.iter()
                .map(|t| TensorMetadata {
                    name: t.name.clone(),
                    datatype: t.datatype,
                    shape: spec.client_dims(&t.dims),
                })
                .collect()
        };
        Ok(ModelMetadata {
            name: spec.name.clone(),
            versions,
            platform: spec.platform.clone(),
            inputs: tensors(&spec.inputs),
            outputs: tensors(&spec.outputs),
        })
    }

    /// Runs one inference request. The answer is [`Self::submit`]'s boxed future itself:
    /// an `async` wrapper around it would hold the request twice more in every caller's
    /// future (moved into the wrapper, then out of it), which the hot path pays in copies.
    pub fn infer(&self, request: InferRequest) -> Answer {
        self.submit(request)
    }

    /// Admits one inference request now and returns the future of its answer: requests
    /// submitted one after another are queued in that order (gRPC streams need this for
    /// sequences).
    ///
    /// Outputs requested as classifications are classified here, on the way out, as
    /// Triton's frontends do: after the model (and its response cache, which holds the
    /// raw outputs) answered.
    pub fn submit(&self, request: InferRequest) -> Answer {
        self.admit(request).unwrap_or_else(refused)
    }

    /// [`Self::submit`], telling a refusal before the request was issued (an unknown
    /// model, validation, a full queue) from the answer of an issued request, however
    /// soon that comes (see [`crate::loaded::LoadedModel::admit`]).
    pub fn admit(&self, request: InferRequest) -> Result<Answer> {
        let model = self
            .repository
            .get(&request.model_name, request.model_version);
        self.admit_to(InferTarget(model), request)
    }

    /// [`Self::submit`] to the model version a [`Self::infer_target`] found.
    pub fn submit_to(&self, target: InferTarget, request: InferRequest) -> Answer {
        self.admit_to(target, request).unwrap_or_else(refused)
    }

    /// [`Self::admit`] to the model version a [`Self::infer_target`] found.
    pub fn admit_to(&self, target: InferTarget, mut request: InferRequest) -> Result<Answer> {
        let received_at = Instant::now();
        let watch = self.shm.watch_inputs(&request.inputs);
        let classification = std::mem::take(&mut request.classification);
        let model = target.0?;
        if model.spec().decoupled {
            return Err(Error::unsupported(format!(
                "model '{}' is decoupled: its answers are a stream",
                model.spec().name
            )));
        }
        let spec = (!classification.is_empty()).then(|| model.spec().clone());
        let answer = model.admit(request, received_at)?;
        if watch.is_none() && spec.is_none() {
            return Ok(answer);
        }
        Ok(Box::pin(async move {
            let mut response = answer.await?;
            // Inputs read from a region truncated under the request read zeros: fail it.
            if let Some(watch) = watch {
                watch.verify()?;
            }
            if let Some(spec) = spec {
                response = classify(response, classification, spec).await?;
            }
            Ok(response)
        }))
    }

    /// Admits one inference request now and returns the stream of its answers: for a
    /// decoupled model every response it sends, the last one marked; for any other
    /// model its one answer, marked last. Must run inside the server's runtime.
    pub fn submit_stream(&self, request: InferRequest) -> Result<ResponseStream> {
        self.submit_stream_holding(request, RESPONSES_BUFFERED)
    }

    /// [`Self::submit_stream`] where at most `waiting` responses of a decoupled model
    /// wait for the caller before its backend waits (`--grpc-max-response-pool-size`).
    pub fn submit_stream_holding(
        &self,
        request: InferRequest,
        waiting: usize,
    ) -> Result<ResponseStream> {
        let model = self
            .repository
            .get(&request.model_name, request.model_version)?;
        if model.spec().decoupled {
            return model.submit_stream(request, Instant::now(), waiting);
        }
        let answer = self.submit_to(InferTarget(Ok(model)), request);
        // One message: the channel never fills.
        let (sender, stream) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            let result = answer.await;
            let _ = sender
                .send(StreamedResponse {
                    result: Some(result),
                    last: true,
                })
                .await;
        });
        Ok(stream)
    }

    /// The model version a request for `name` and `version` goes to, looked up once for
    /// both the check an endpoint that answers once makes before reading the body and
    /// [`Self::submit_to`]. A decoupled model is refused here with Triton's message for
    /// `endpoint` (`HTTP end point`, `ModelInfer RPC`); a model that is not there is not
    /// an error yet: the submit reports it, after the request's own errors, as Triton
    /// orders them.
    pub fn infer_target(
        &self,
        name: &str,
        version: Option<i64>,
        endpoint: &str,
    ) -> Result<InferTarget> {
        let model = self.repository.get(name, version);
        if model.as_ref().is_ok_and(|m| m.spec().decoupled) {
            return Err(Error::unsupported(format!(
                "{endpoint} doesn't support models with decoupled transaction policy"
            )));
        }
        Ok(InferTarget(model))
    }

    /// Statistics of one model (all its ready versions, or one) or of every model.
    pub fn statistics(
        &self,
        name: Option<&str>,
        version: Option<i64>,
    ) -> Result<Vec<ModelStatsSnapshot>> {
        if let Some(name) = name {
            let models: Vec<_> = match version {
                Some(_) => vec![self.repository.get(name, version).map_err(|_| {
                    Error::invalid_arg(format!(
                        "requested model version is not available for model '{name}'"
                    ))
                })?],
                None => self.repository.ready_models_named(name)?,
            };
            return Ok(models.iter().map(|m| m.snapshot()).collect());
        }
        Ok(self.all_statistics())
    }

    /// Prometheus text for the metrics endpoint.
    pub fn metrics_text(&self) -> String {
        let cache = self.repository.cache().and_then(|c| c.snapshot());
        let models: Vec<_> = self
            .repository
            .ready_models()
            .iter()
            .map(|m| m.metrics())
            .collect();
        crate::metrics::render(&models, cache.as_ref())
    }

    fn all_statistics(&self) -> Vec<ModelStatsSnapshot> {
        self.repository
            .ready_models()
            .iter()
            .map(|m| m.snapshot())
            .collect()
    }
}

/// Outputs at most this big (bytes of the outputs to classify) are classified on the
/// calling task; bigger ones (a sort of up to a million elements per row) on a blocking
/// thread, so they never stall the threads that answer requests.
const CLASSIFY_INLINE_BYTES: usize = 256 * 1024;

/// Applies the request's classifications to `response`.
async fn classify(
    mut response: InferResponse,
    classification: Classifications,
    spec: Arc<ModelSpec>,
) -> Result<InferResponse> {
    let bytes: usize = response
        .outputs
        .iter()
        .filter(|o| classification.iter().any(|(name, _)| *name == o.name))
        .map(|o| o.data.len())
        .sum();
    let run = move || {
        classify_response(
            &mut response,
            &classification,
            spec.max_batch_size > 0,
            &spec.labels,
        )
        .map(|()| response)
    };
    if bytes <= CLASSIFY_INLINE_BYTES {
        return run();
    }
    tokio::task::spawn_blocking(run)
        .await
        .unwrap_or_else(|e| Err(Error::internal(format!("classification failed: {e}"))))
}
