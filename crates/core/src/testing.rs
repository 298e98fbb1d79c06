//! Test support shared by every crate's tests: one configurable identity backend
//! ([`TestBackend`]) and the few builders every test needs (specs from config text,
//! requests with one typed input, a model directory on disk, a model behind the default
//! scheduler). It lives in the core, behind `cfg(test)` or the `testing` feature, because
//! the core's own unit tests cannot use a separate crate implementing the core's traits
//! (the dev-dependency cycle would make two distinct `nereid_core` crates).
//!
//! - [`fuzz`]: the mutation fuzzer behind the `fuzz_tests` modules.
//! - [`streaming`]: how the backend answers as a decoupled model.

pub mod fuzz;
pub mod streaming;

pub use streaming::{Streaming, RESPONSES_PARAMETER};

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::backend::{
    Backend, ComputeTiming, InstanceBackend, InstanceConfig, ModelBackend, Outcome, Streamed,
};
use crate::batch::Batch;
use crate::cache::ResponseCache;
use crate::config::{
    normalize_and_validate, parse_model_config, ModelConfig, NormalizeOptions, PublishedConfig,
};
use crate::error::{Error, Result};
use crate::loaded::LoadedModel;
use crate::model::ModelSpec;
use crate::repository::BackendRegistry;
use crate::request::{InferRequest, InferResponse, InputTensor, OutputTensor, Parameters};
use crate::response_stream::ResponseSender;
use crate::scheduler::{
    DefaultScheduler, Instance, InstancePool, Job, Reply, DEFAULT_QUEUE_CAPACITY,
};
use crate::stats::{ModelStats, RequestRecord};
use nereid_proto::DataType;

/// A trace manager tracing every request (timestamps, and tensors when asked) into
/// `<file>.<n>`, one file per trace: what the trace tests read back.
pub fn trace_every_request(file: &Path, tensors: bool) -> crate::trace::TraceManager {
    use crate::trace::{TraceLevel, TraceManager, TraceOptions};
    let options = TraceOptions {
        level: TraceLevel {
            timestamps: true,
            tensors,
        },
        rate: 1,
        log_frequency: 1,
        file: file.display().to_string(),
        ..TraceOptions::default()
    };
    TraceManager::new(&options, None).expect("valid trace options")
}

/// The backend name [`TestBackend`] registers under: what test configs write as
/// `backend: "identity"`.
pub const BACKEND_NAME: &str = "identity";

/// The model file a version directory needs for [`TestBackend`] (its default model file).
pub const MODEL_FILE: &str = "model.id";

/// What the test backend answers with.
#[derive(Debug, Clone)]
pub enum Outputs {
    /// Each `(input, output)` pair: the input gathered over the batch, returned under the
    /// output's name and scattered back (an absent optional input gives no output).
    Echo(Vec<(String, String)>),
    /// One INT32 output: the element-wise sum of every INT32 input plus `add`, so that
    /// chained models show which steps ran (ensemble data flow).
    SumInt32 {
        /// Output name.
        output: String,
        /// Added to every element.
        add: i32,
    },
    /// The same tensors for every request, whatever it sent.
    Fixed(Vec<OutputTensor>),
}

/// Which requests fail, and how.
#[derive(Debug, Clone)]
enum Failure {
    /// Every request.
    All(Error),
    /// Requests whose first input's first element, read as INT32, equals the marker.
    Marker(i32, Error),
}

/// The configuration of a [`TestBackend`], fixed before it is shared.
#[derive(Debug, Clone)]
struct Behaviour {
    outputs: Outputs,
    delay: Duration,
    failure: Option<Failure>,
    streaming: Streaming,
}

/// One `execute` call, as a test sees it afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The instance that ran it.
    pub instance: String,
    /// The batch's total batch size (sum of the requests' batch sizes).
    pub batch_size: usize,
    /// The request ids, in batch order.
    pub ids: Vec<String>,
    /// The requests' parameters, in batch order: what reached the model.
    pub parameters: Vec<Parameters>,
}

/// What every backend, model and instance made from one [`TestBackend`] shares.
#[derive(Debug)]
struct Shared {
    behaviour: Behaviour,
    // Appended by instance worker threads, read by the test; held only to push or copy.
    executions: Mutex<Vec<Execution>>,
    /// Instances created and dropped (finalized) so far.
    created: AtomicUsize,
    finalized: AtomicUsize,
}

/// A configurable identity backend: echoes inputs to outputs (or answers a fixed output),
/// optionally after a delay or with failures, and records every execution so tests can
/// assert batching. It is both the `Backend` and the loaded `ModelBackend`; its instances
/// (`InstanceBackend`s) are private. Every clone and every instance shares one record.
#[derive(Debug, Clone)]
pub struct TestBackend {
    shared: Arc<Shared>,
}

impl TestBackend {
    /// A backend answering with `outputs`, no delay, no failures.
    pub fn new(outputs: Outputs) -> Self {
        Self {
            shared: Arc::new(Shared {
                behaviour: Behaviour {
                    outputs,
                    delay: Duration::ZERO,
                    failure: None,
                    streaming: Streaming::default(),
                },
                executions: Mutex::default(),
                created: AtomicUsize::new(0),
                finalized: AtomicUsize::new(0),
            }),
        }
    }

    /// The usual identity model: `INPUT0` echoed to `OUTPUT0`.
    pub fn identity() -> Self {
        Self::echo(&[("INPUT0", "OUTPUT0")])
    }

    /// Echoes each `(input, output)` pair.
    pub fn echo(pairs: &[(&str, &str)]) -> Self {
        Self::new(Outputs::Echo(
            pairs
                .iter()
                .map(|(i, o)| (i.to_string(), o.to_string()))
                .collect(),
        ))
    }

    fn behaviour(&mut self) -> &mut Behaviour {
        &mut Arc::get_mut(&mut self.shared)
            .expect("a test backend is configured before it is cloned or loaded")
            .behaviour
    }

    /// Sleeps `delay` (real time: instances run on OS threads) in every execution, so
    /// that requests pile up behind a busy instance.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.behaviour().delay = delay;
        self
    }

    /// Fails every request with `error`.
    pub fn failing(mut self, error: Error) -> Self {
        self.behaviour().failure = Some(Failure::All(error));
        self
    }

    /// Fails the requests whose first input starts with the INT32 value `marker`; the
    /// others in the same batch still succeed.
    pub fn failing_on(mut self, marker: i32, error: Error) -> Self {
        self.behaviour().failure = Some(Failure::Marker(marker, error));
        self
    }

    /// How a model of this backend with the decoupled transaction policy answers (by
    /// default each request's answer once, marked final).
    pub fn streaming(mut self, streaming: Streaming) -> Self {
        self.behaviour().streaming = streaming;
        self
    }

    /// Every execution so far, in order.
    pub fn executions(&self) -> Vec<Execution> {
        self.shared.executions.lock().clone()
    }

    /// The batch size of every execution so far, in order.
    pub fn batch_sizes(&self) -> Vec<usize> {
        self.shared
            .executions
            .lock()
            .iter()
            .map(|e| e.batch_size)
            .collect()
    }

    /// How many instances were created and how many finalized so far, as a Python
    /// model counts its `initialize` and `finalize` calls.
    pub fn instance_counts(&self) -> (usize, usize) {
        (
            self.shared.created.load(Ordering::SeqCst),
            self.shared.finalized.load(Ordering::SeqCst),
        )
    }

    /// A registry holding this backend under its name, for a `ModelRepository`.
    pub fn registry(&self) -> BackendRegistry {
        let mut registry = BackendRegistry::new();
        registry.insert(BACKEND_NAME, Arc::new(self.clone()) as _);
        registry
    }

    /// `count` CPU instances named `<model>_<i>`, ready for `InstancePool::start`.
    pub fn instances(&self, model: &str, count: usize) -> Vec<Instance> {
        (0..count)
            .map(|i| {
                let name = format!("{model}_{i}");
                Instance::unlimited(name.clone(), self.instance(name))
            })
            .collect()
    }

    fn instance(&self, name: String) -> Box<dyn InstanceBackend> {
        self.shared.created.fetch_add(1, Ordering::SeqCst);
        Box::new(TestInstance {
            shared: self.shared.clone(),
            name,
        })
    }
}

impl Backend for TestBackend {
    fn name(&self) -> &str {
        BACKEND_NAME
    }

    fn default_model_filename(&self) -> &'static str {
        MODEL_FILE
    }

    fn autocomplete(&self, _config: &mut ModelConfig, _model_file: &Path) -> Result<()> {
        Ok(())
    }

    fn load_model(&self, _spec: Arc<ModelSpec>, _file: &Path) -> Result<Box<dyn ModelBackend>> {
        Ok(Box::new(self.clone()))
    }
}

impl ModelBackend for TestBackend {
    fn create_instance(&self, instance: &InstanceConfig) -> Result<Box<dyn InstanceBackend>> {
        Ok(self.instance(instance.name.clone()))
    }
}

/// One instance of a [`TestBackend`].
struct TestInstance {
    shared: Arc<Shared>,
    name: String,
}

impl InstanceBackend for TestInstance {
    fn execute(&mut self, batch: &Batch<'_>, _timing: &mut ComputeTiming) -> Vec<Outcome> {
        self.answers(batch).into_iter().map(Outcome::from).collect()
    }

    fn execute_decoupled(
        &mut self,
        batch: &Batch<'_>,
        senders: Vec<ResponseSender>,
        _timing: &mut ComputeTiming,
    ) -> Vec<Streamed> {
        let answers = self.answers(batch);
        let released = answers.iter().map(|_| Streamed::Released).collect();
        self.shared
            .behaviour
            .streaming
            .send(batch.requests(), answers, senders);
        released
    }
}

impl Drop for TestInstance {
    fn drop(&mut self) {
        self.shared.finalized.fetch_add(1, Ordering::SeqCst);
    }
}

impl TestInstance {
    /// Records the execution of `batch`, then answers each of its requests.
    fn answers(&self, batch: &Batch<'_>) -> Vec<Result<Vec<OutputTensor>>> {
        self.shared.executions.lock().push(Execution {
            instance: self.name.clone(),
            batch_size: batch.total_batch_size(),
            ids: batch.requests().iter().map(|r| r.id.clone()).collect(),
            parameters: batch
                .requests()
                .iter()
                .map(|r| r.parameters.clone())
                .collect(),
        });
        let behaviour = &self.shared.behaviour;
        if !behaviour.delay.is_zero() {
            std::thread::sleep(behaviour.delay);
        }
        let failed = |request: &InferRequest| match &behaviour.failure {
            None => None,
            Some(Failure::All(e)) => Some(e.clone()),
            Some(Failure::Marker(marker, e)) => {
                let first = request.inputs.first().and_then(|i| i.data.get(..4));
                (first == Some(&marker.to_le_bytes()[..])).then(|| e.clone())
            }
        };
        let failures: Vec<Option<Error>> = batch.requests().iter().map(|r| failed(r)).collect();
        if failures.iter().all(Option::is_none) {
            return answer(&behaviour.outputs, batch);
        }
        // The requests that pass run as a batch of their own.
        let passing: Vec<&InferRequest> = batch
            .requests()
            .iter()
            .zip(&failures)
            .filter(|(_, f)| f.is_none())
            .map(|(r, _)| *r)
            .collect();
        let sizes = passing
            .iter()
            .map(|r| batch_size(batch.spec(), r))
            .collect();
        let mut passed = if passing.is_empty() {
            Vec::new()
        } else {
            answer(
                &behaviour.outputs,
                &Batch::new(batch.spec(), passing, sizes),
            )
        }
        .into_iter();
        failures
            .into_iter()
            .map(|f| match f {
                Some(e) => Err(e),
                None => passed
                    .next()
                    .unwrap_or_else(|| Err(Error::internal("test backend lost an answer"))),
            })
            .collect()
    }
}

/// A request's batch size: its first input's leading dimension when the model batches.
fn batch_size(spec: &ModelSpec, request: &InferRequest) -> usize {
    if spec.max_batch_size == 0 {
        return 1;
    }
    request
        .inputs
        .first()
        .and_then(|i| i.shape.first())
        .and_then(|d| usize::try_from(*d).ok())
        .unwrap_or(1)
}

/// The answers to every request of `batch` when none fails.
fn answer(outputs: &Outputs, batch: &Batch<'_>) -> Vec<Result<Vec<OutputTensor>>> {
    let all = |e: Error| batch.requests().iter().map(|_| Err(e.clone())).collect();
    let pairs: Vec<(String, String)> = match outputs {
        Outputs::Echo(pairs) => pairs.clone(),
        Outputs::SumInt32 { output, add } => {
            return match sum_int32(batch, output, *add) {
                Ok(tensor) => batch.scatter(vec![tensor]),
                Err(e) => all(e),
            };
        }
        Outputs::Fixed(tensors) => {
            return batch
                .requests()
                .iter()
                .map(|_| Ok(tensors.clone()))
                .collect()
        }
    };
    let mut tensors = Vec::with_capacity(pairs.len());
    for (input, output) in pairs {
        match batch.gather_input(&input) {
            Ok(Some(gathered)) => tensors.push(OutputTensor {
                name: output,
                datatype: batch
                    .spec()
                    .input(&input)
                    .map_or(DataType::Bytes, |t| t.datatype),
                shape: gathered.shape,
                data: gathered.data,
                device: None,
            }),
            Ok(None) => {}
            Err(e) => return all(e),
        }
    }
    batch.scatter(tensors)
}

/// [`Outputs::SumInt32`] over a whole batch.
fn sum_int32(batch: &Batch<'_>, output: &str, add: i32) -> Result<OutputTensor> {
    let mut shape = None;
    let mut sum: Vec<i32> = Vec::new();
    for input in &batch.spec().inputs {
        let Some(gathered) = batch.gather_input(&input.name)? else {
            continue;
        };
        let values = int32s(&gathered.data);
        if sum.is_empty() {
            sum = vec![add; values.len()];
        }
        for (s, v) in sum.iter_mut().zip(values) {
            *s += v;
        }
        shape.get_or_insert(gathered.shape);
    }
    Ok(OutputTensor {
        name: output.to_string(),
        datatype: DataType::Int32,
        shape: shape.ok_or_else(|| Error::internal("the test backend got no input"))?,
        data: int32_bytes(&sum),
        device: None,
    })
}

/// A normalized, validated configuration of model `name` from `config.pbtxt` text, the way
/// the repository builds one.
pub fn config(name: &str, text: &str) -> ModelConfig {
    let mut config =
        parse_model_config(Path::new("config.pbtxt"), text).expect("test config parses");
    normalize_and_validate(&mut config, name, NormalizeOptions::default())
        .expect("test config is valid");
    config
}

/// The spec of version 1 of model `name` from `config.pbtxt` text.
pub fn spec(name: &str, text: &str) -> Arc<ModelSpec> {
    Arc::new(ModelSpec::new(config(name, text), 1).expect("test spec builds"))
}

/// The spec of a sequence model `seq` (INT32 `IN` to `OUT`, one element) whose
/// `sequence_batching` section holds `section`.
pub fn sequence_spec(max_batch_size: u32, section: &str) -> Arc<ModelSpec> {
    spec(
        "seq",
        &format!(
            r#"backend: "identity" max_batch_size: {max_batch_size}
               input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
               output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
               sequence_batching {{ {section} }}"#
        ),
    )
}

/// INT32 values as little-endian bytes, as tensors carry them.
pub fn int32_bytes(values: &[i32]) -> Bytes {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Little-endian bytes read back as INT32 values.
pub fn int32s(data: &[u8]) -> Vec<i32> {
    data.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// FP32 values as little-endian bytes.
pub fn fp32_bytes(values: &[f32]) -> Bytes {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// An INT32 input tensor.
pub fn int32_input(name: &str, shape: &[i64], values: &[i32]) -> InputTensor {
    InputTensor {
        name: name.to_string(),
        datatype: DataType::Int32,
        shape: shape.to_vec(),
        data: int32_bytes(values),
        device: None,
    }
}

/// An FP32 input tensor.
pub fn fp32_input(name: &str, shape: &[i64], values: &[f32]) -> InputTensor {
    InputTensor {
        name: name.to_string(),
        datatype: DataType::Fp32,
        shape: shape.to_vec(),
        data: fp32_bytes(values),
        device: None,
    }
}

/// A request to `model` with id `id` and the given inputs (all outputs, no parameters).
pub fn request(model: &str, id: &str, inputs: Vec<InputTensor>) -> InferRequest {
    InferRequest {
        model_name: model.to_string(),
        id: id.to_string(),
        inputs,
        ..Default::default()
    }
}

/// Writes model `name` into repository `root`: its `config.pbtxt` and, for each of
/// `versions`, a version directory holding [`MODEL_FILE`].
pub fn write_model(root: &Path, name: &str, config: &str, versions: &[i64]) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("model directory");
    std::fs::write(dir.join("config.pbtxt"), config).expect("config.pbtxt");
    for v in versions {
        let version = dir.join(v.to_string());
        std::fs::create_dir_all(&version).expect("version directory");
        std::fs::write(version.join(MODEL_FILE), b"").expect("model file");
    }
}

/// A server over repository `root` with every model in it loaded on `backend`, on the
/// current tokio runtime: for frontend tests that look at what reached the model.
pub async fn server(root: &Path, backend: &TestBackend) -> Arc<crate::server::Server> {
    let options = repository_options(root, crate::repository::ControlMode::None, &["*"]);
    let repository = Arc::new(crate::repository::ModelRepository::new(
        options,
        backend.registry(),
    ));
    repository
        .load_startup_models()
        .await
        .expect("the test models load");
    let identity = crate::server::ServerIdentity {
        name: "nereid".into(),
        version: "0.0.0".into(),
    };
    Arc::new(crate::server::Server::new(identity, repository, true))
}

/// Options for a repository at `root` in `control_mode` that loads `startup_models` at
/// start (`*` for all), with strict configs, no cache and the default storage limits.
pub fn repository_options(
    root: &Path,
    control_mode: crate::repository::ControlMode,
    startup_models: &[&str],
) -> crate::repository::RepositoryOptions {
    crate::repository::RepositoryOptions {
        roots: vec![root.to_path_buf()],
        remotes: Vec::new(),
        control_mode,
        startup_models: startup_models.iter().map(|m| m.to_string()).collect(),
        settings: crate::repository::LoadSettings {
            rate_limiter: None,
            strict_model_config: true,
            normalize: NormalizeOptions::default(),
            cache: None,
            metrics: Default::default(),
            flags: Default::default(),
            batch_strategies: None,
        },
        storage: Default::default(),
    }
}

/// Where a job's answer arrives.
pub type JobAnswer = tokio::sync::oneshot::Receiver<Result<InferResponse>>;

/// `request` as a job of `batch_size` rows, enqueued now on the schedulers' clock and
/// counted nowhere (give it a record with [`RequestRecord::open`] to count it).
pub fn job(request: InferRequest, batch_size: usize) -> (Job, JobAnswer) {
    let (sender, answer) = tokio::sync::oneshot::channel();
    let at = crate::scheduler::now();
    let job = Job {
        request,
        batch_size,
        reply: Reply::new(sender),
        record: RequestRecord::untracked(at),
        enqueued_at: at,
        span: tracing::Span::none(),
        padding: false,
        on_outputs: None,
        stream: None,
        on_iteration: None,
    };
    (job, answer)
}

/// Version 1 of the model `config` (normalized, see [`config`]) served by one instance of
/// `backend` behind the default scheduler, on the current tokio runtime, using `cache` if
/// given.
pub fn serve(
    config: ModelConfig,
    backend: &TestBackend,
    cache: Option<Arc<ResponseCache>>,
) -> Arc<LoadedModel> {
    let spec = Arc::new(ModelSpec::new(config.clone(), 1).expect("test spec builds"));
    let published = Arc::new(PublishedConfig::new(config));
    let stats = Arc::new(ModelStats::default());
    let (sender, receiver) = InstancePool::channel(DEFAULT_QUEUE_CAPACITY);
    let pool = Arc::new(
        InstancePool::start(
            spec.clone(),
            stats.clone(),
            backend.instances(&spec.name, 1),
            receiver,
            &[],
        )
        .expect("instance threads start"),
    );
    let scheduler = Box::new(DefaultScheduler::new(sender, pool));
    Arc::new(LoadedModel::new(spec, published, stats, scheduler, cache))
}
