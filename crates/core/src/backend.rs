//! The backend contract, after Triton's: a backend loads models, a loaded model creates
//! instances, and an instance executes batches. Backends are chosen at build time (trait
//! objects registered by the binary); a [`BackendLoader`] adds Triton's backend libraries
//! behind the same traits, so every scheduler serves them unchanged.

use std::path::Path;
use std::sync::Arc;

use nereid_proto::inference::{ModelConfig, ModelInstanceGroup};

use crate::batch::Batch;
use crate::error::Result;
use crate::model::{InstanceKind, ModelSpec};
use crate::request::{OutputTensor, Parameters};
use crate::response_stream::ResponseSender;
use crate::sequence_flags::SequenceId;
use crate::stats::ModelStats;
// Measured by backends, counted by the statistics; defined with the statistics so that
// they need nothing from here.
pub use crate::stats::{ComputeTiming, StateUsage};

/// Identity of one model instance (one per `instance_group` count).
#[derive(Debug, Clone)]
pub struct InstanceConfig {
    /// `<group name>_<index within group>`, as Triton names instances.
    pub name: String,
    /// Device placement.
    pub kind: InstanceKind,
    /// An instance of a `passive` group: created and initialized, never sent requests
    /// (a backend may hand work to it itself, as Triton's `distributed_addsub` does).
    pub passive: bool,
    /// The model version's statistics, where a backend reports per-response timing
    /// (`TRITONBACKEND_ModelInstanceReportResponseStatistics`).
    pub stats: Arc<ModelStats>,
}

/// A backend (e.g. ONNX Runtime): one value per server, shared by all its models.
pub trait Backend: Send + Sync {
    /// The `backend` name used in `config.pbtxt` (e.g. `onnxruntime`).
    fn name(&self) -> &str;

    /// The model file looked for in a version directory when the config names none.
    fn default_model_filename(&self) -> &'static str;

    /// Completes a missing or partial configuration from the model file, as Triton's
    /// backends do unless `--strict-model-config` is given.
    fn autocomplete(&self, config: &mut ModelConfig, model_file: &Path) -> Result<()>;

    /// Whether a model that names neither backend nor platform goes to this backend when
    /// its default model file is present (Triton's auto-detection). Backends that need
    /// settings of their own (the stateful backend) are only used when named.
    fn detected_by_file(&self) -> bool {
        true
    }

    /// The model file of a version directory: the config's `default_model_filename`, or
    /// this backend's default. Backends with their own file parameter override it.
    fn model_filename(&self, config: &ModelConfig) -> String {
        if config.default_model_filename.is_empty() {
            self.default_model_filename().to_string()
        } else {
            config.default_model_filename.clone()
        }
    }

    /// Loads one model version.
    fn load_model(&self, spec: Arc<ModelSpec>, model_file: &Path) -> Result<Box<dyn ModelBackend>>;

    /// The instance groups the backend prefers, best first (Triton's
    /// `TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup`): they decide the kind,
    /// count and GPUs of a model that configures no group, and fill in the count and GPUs
    /// a group of the same kind leaves out (see `normalize_instance_groups`).
    fn preferred_instance_groups(&self) -> Vec<ModelInstanceGroup> {
        Vec::new()
    }

    /// Whether the backend reads inputs in GPU memory (Triton's GPU backends do): a model
    /// of it whose instances are all on GPUs then gets CUDA shared-memory inputs where
    /// they are, not copied to the host (see [`crate::request::InputTensor::device`]).
    fn reads_gpu_inputs(&self) -> bool {
        false
    }
}

/// The preferred instance groups of a backend that runs on the CPU only (Nereid's own
/// ONNX Runtime and llama.cpp backends, as OpenVINO declares for itself): CPU instances,
/// the count left to the model's default. Its models stay off the GPUs, `KIND_AUTO`
/// groups included (see `normalize_instance_groups`).
pub fn cpu_instances_only() -> Vec<ModelInstanceGroup> {
    vec![ModelInstanceGroup {
        kind: nereid_proto::inference::model_instance_group::Kind::Cpu as i32,
        ..Default::default()
    }]
}

/// The model a [`BackendLoader`] finds a backend for. Triton looks for a backend library
/// in the model's own folders (`<model>/<version>/`, `<model>/`) before the backend
/// directory, so where the model lives decides which library serves it.
#[derive(Debug, Clone, Copy)]
pub struct ModelSite<'a> {
    /// The model's name, for messages.
    pub name: &'a str,
    /// The model's folder, holding its version folders.
    pub dir: &'a Path,
    /// The version whose folder is searched (the newest one loaded).
    pub version: i64,
}

/// Loads the backends a registry has no native implementation for (Triton's backend
/// libraries), resolving each model's library as Triton does and sharing a library
/// already initialized under the same name.
pub trait BackendLoader: Send + Sync {
    /// The backend serving the model at `site` whose configuration is `config`: its
    /// `backend` and `runtime` fields name the library. The loader may complete `config`
    /// as Triton does (a python-based backend's `runtime` and execution environment). An
    /// error fails the loads of the model's versions.
    fn load(&self, site: &ModelSite<'_>, config: &mut ModelConfig) -> Result<Arc<dyn Backend>>;
}

/// A loaded model version; creates its instances.
pub trait ModelBackend: Send + Sync {
    /// Creates one instance; each instance is driven by its own worker thread.
    fn create_instance(&self, instance: &InstanceConfig) -> Result<Box<dyn InstanceBackend>>;
}

/// One model instance, owned by one worker thread (so it need not be `Sync`).
pub trait InstanceBackend: Send {
    /// Executes a batch and says what became of each request of it, in batch order:
    /// answered (with its response parameters) or rescheduled.
    fn execute(&mut self, batch: &Batch<'_>, timing: &mut ComputeTiming) -> Vec<Outcome>;

    /// Executes a batch of a decoupled model (`model_transaction_policy { decoupled:
    /// true }`): each request's responses go to its sender, in batch order, any number
    /// and from any thread, until one marked last. Senders may outlive the call (a
    /// backend that answers later); returning frees the instance for its next batch.
    /// Says, in batch order, which requests were rescheduled (handing back their
    /// senders). Backends without decoupled support refuse each request.
    fn execute_decoupled(
        &mut self,
        batch: &Batch<'_>,
        senders: Vec<ResponseSender>,
        _timing: &mut ComputeTiming,
    ) -> Vec<Streamed> {
        let model = &batch.spec().name;
        senders
            .into_iter()
            .map(|sender| {
                sender.send(
                    Err(crate::error::Error::unsupported(format!(
                        "the backend of model '{model}' does not support the decoupled transaction policy"
                    ))),
                    true,
                );
                Streamed::Released
            })
            .collect()
    }

    /// For a backend that keeps each sequence's state itself: how many sequences this
    /// instance can hold. The sequence batcher then gives the instance no more slots
    /// and refuses new sequences beyond them at once, instead of queueing them.
    fn sequence_capacity(&self) -> Option<usize> {
        None
    }

    /// Sequences the sequence batcher released without an END (idle timeout); a backend
    /// that keeps state drops theirs. Called before the instance's next execution.
    fn release_sequences(&mut self, _ids: &[SequenceId]) {}

    /// The state memory this instance holds, for backends that keep sequence state.
    fn state_usage(&self) -> Option<StateUsage> {
        None
    }
}

/// Triton's error for a request rescheduled by the backend of a model without iterative
/// sequences (nothing would run it again).
pub const NOT_RESCHEDULABLE: &str = "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.";

/// What an execution made of one request of a batch: Triton's backends either send a
/// request's response or release it for rescheduling
/// (`TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`). Returned together, so that nothing about
/// an execution is asked for after it.
#[derive(Debug)]
pub enum Outcome {
    /// Answered with its outputs or its error, and the parameters the backend set on the
    /// response (`TRITONBACKEND_ResponseSet*Parameter`; usually none).
    Answered(Result<Vec<OutputTensor>>, Parameters),
    /// Not answered: it goes back to its scheduler to run again.
    Rescheduled,
}

impl From<Result<Vec<OutputTensor>>> for Outcome {
    /// A response without parameters, the common case.
    fn from(result: Result<Vec<OutputTensor>>) -> Self {
        Self::Answered(result, Parameters::new())
    }
}

/// What a decoupled execution made of one request: its responses went (or will go) to
/// its sender, or the backend rescheduled it and handed the sender back.
#[derive(Debug)]
pub enum Streamed {
    /// Released: its sender answers it, now or later.
    Released,
    /// Rescheduled with the sender its later responses go to.
    Rescheduled(ResponseSender),
}

/// The settings Triton hands backend `name` (`TRITONBACKEND_BackendConfig`, and what the
/// ONNX Runtime backend logs as its "backend configuration"): the global ones (backend
/// directory, auto-completion, compute capability, default max batch size) overridden by
/// the `--backend-config` `settings` (backend, key, value) that are global (empty
/// backend) or `name`'s, as strings under `cmdline`.
pub fn cmdline_config(
    name: &str,
    directory: &Path,
    strict_model_config: bool,
    settings: &[(String, String, String)],
) -> serde_json::Value {
    let mut cmdline = serde_json::Map::new();
    let mut set = |k: &str, v: String| {
        cmdline.insert(k.to_string(), serde_json::Value::String(v));
    };
    set(
        "backend-directory",
        directory.to_string_lossy().into_owned(),
    );
    set("auto-complete-config", (!strict_model_config).to_string());
    set("min-compute-capability", "0.000000".to_string());
    set("default-max-batch-size", "4".to_string());
    for (backend, key, value) in settings {
        if backend.is_empty() || backend == name {
            set(key, value.clone());
        }
    }
    serde_json::json!({ "cmdline": cmdline })
}
