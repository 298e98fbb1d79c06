//! The backend contract, after Triton's: a backend loads models, a loaded model creates
//! instances, and an instance executes batches. Backends are chosen at build time (trait
//! objects registered by the binary); a [`BackendLoader`] adds Triton's backend libraries
//! behind the same traits, so every scheduler serves them unchanged.

use std::path::Path;
use std::sync::Arc;

use nereid_proto::inference::ModelConfig;

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
    /// Executes a batch and answers each request of it separately, in batch order.
    fn execute(
        &mut self,
        batch: &Batch<'_>,
        timing: &mut ComputeTiming,
    ) -> Vec<Result<Vec<OutputTensor>>>;

    /// Executes a batch of a decoupled model (`model_transaction_policy { decoupled:
    /// true }`): each request's responses go to its sender, in batch order, any number
    /// and from any thread, until one marked last. Senders may outlive the call (a
    /// backend that answers later); returning frees the instance for its next batch.
    /// Backends without decoupled support refuse each request.
    fn execute_decoupled(
        &mut self,
        batch: &Batch<'_>,
        senders: Vec<ResponseSender>,
        _timing: &mut ComputeTiming,
    ) {
        let model = &batch.spec().name;
        for sender in senders {
            sender.send(
                Err(crate::Error::unsupported(format!(
                    "the backend of model '{model}' does not support the decoupled transaction policy"
                ))),
                true,
            );
        }
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

    /// The requests of the batch just executed that the backend asked to run again
    /// (Triton's request rescheduling, `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`): they
    /// got no answer yet and go back to their scheduler. Taken once per execution.
    fn take_rescheduled(&mut self) -> Vec<Rescheduled> {
        Vec::new()
    }

    /// The parameters the backend set on each response of the batch just executed
    /// (Triton's `TRITONBACKEND_ResponseSet*Parameter`), in batch order; shorter or
    /// empty when it set none. Taken once per execution, like [`Self::take_rescheduled`].
    fn take_response_parameters(&mut self) -> Vec<Parameters> {
        Vec::new()
    }
}

/// Triton's error for a request rescheduled by the backend of a model without iterative
/// sequences (nothing would run it again).
pub const NOT_RESCHEDULABLE: &str = "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag.";

/// A request the backend rescheduled: its place in the batch and, for a decoupled model,
/// the sender its later responses go to.
#[derive(Debug)]
pub struct Rescheduled {
    /// Index in the batch.
    pub index: usize,
    /// A decoupled request's stream, handed back by the backend.
    pub stream: Option<ResponseSender>,
}
