//! What Nereid does with every field of Triton's model configuration
//! (`model_config.proto`): honoured, accepted without effect (with the reason — mostly
//! GPU and TensorRT settings, which Triton's own CPU build ignores too), or refused: a
//! configuration that sets a refused field fails its load naming the field, so nothing
//! a user configured is silently dropped. A field without an entry cannot exist: a
//! test walks the proto, and another the docs' table (docs/src/reference/model-config.md),
//! against [`FIELDS`].

use prost_reflect::{DynamicMessage, MessageDescriptor, ReflectMessage, Value};

use super::parse::model_config_descriptor;
use super::ModelConfig;
use crate::error::{Error, Result};

/// What happens to a field a configuration sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// It takes effect as in Triton.
    Honoured,
    /// Accepted and reported in the configuration; a warning names it at load.
    NoEffect(&'static str),
    /// The load fails, naming the field.
    Refused(&'static str),
}

use Support::{Honoured, NoEffect, Refused};

const NO_GPU: &str =
    "GPU execution setting; instances run on the CPU here, as in Triton's CPU build";
const TENSORRT: &str = "a TensorRT feature; no backend here has TensorRT";

/// Every field, as `<message>.<field>` (nested messages by their path, without the
/// `inference.` package); `<message>.*` covers every field of a message.
pub const FIELDS: &[(&str, Support)] = &[
    ("ModelConfig.name", Honoured),
    ("ModelConfig.platform", Honoured),
    ("ModelConfig.backend", Honoured),
    ("ModelConfig.runtime", Honoured),
    ("ModelConfig.version_policy", Honoured),
    ("ModelConfig.max_batch_size", Honoured),
    ("ModelConfig.input", Honoured),
    ("ModelConfig.output", Honoured),
    ("ModelConfig.batch_input", Honoured),
    ("ModelConfig.batch_output", Honoured),
    ("ModelConfig.optimization", Honoured),
    ("ModelConfig.dynamic_batching", Honoured),
    ("ModelConfig.sequence_batching", Honoured),
    ("ModelConfig.ensemble_scheduling", Honoured),
    ("ModelConfig.instance_group", Honoured),
    ("ModelConfig.default_model_filename", Honoured),
    (
        "ModelConfig.cc_model_filenames",
        NoEffect("model files per GPU compute capability; no GPU here"),
    ),
    (
        "ModelConfig.metric_tags",
        NoEffect("Triton 2.51 does not apply them to metrics either"),
    ),
    ("ModelConfig.parameters", Honoured),
    ("ModelConfig.model_warmup", Honoured),
    (
        "ModelConfig.model_operations",
        Refused("custom operation libraries are not loaded"),
    ),
    ("ModelConfig.model_transaction_policy", Honoured),
    ("ModelConfig.model_repository_agents", Honoured),
    ("ModelConfig.response_cache", Honoured),
    ("ModelConfig.model_metrics", Honoured),
    ("ModelInput.name", Honoured),
    ("ModelInput.data_type", Honoured),
    (
        "ModelInput.format",
        NoEffect("informational in Triton too: reported in the configuration"),
    ),
    ("ModelInput.dims", Honoured),
    ("ModelInput.reshape", Honoured),
    ("ModelInput.is_shape_tensor", Refused(TENSORRT)),
    ("ModelInput.allow_ragged_batch", Honoured),
    ("ModelInput.optional", Honoured),
    ("ModelInput.is_non_linear_format_io", Refused(TENSORRT)),
    ("ModelOutput.name", Honoured),
    ("ModelOutput.data_type", Honoured),
    ("ModelOutput.dims", Honoured),
    ("ModelOutput.reshape", Honoured),
    ("ModelOutput.label_filename", Honoured),
    ("ModelOutput.is_shape_tensor", Refused(TENSORRT)),
    ("ModelOutput.is_non_linear_format_io", Refused(TENSORRT)),
    ("ModelTensorReshape.*", Honoured),
    ("BatchInput.*", Honoured),
    ("BatchOutput.*", Honoured),
    ("ModelVersionPolicy.*", Honoured),
    ("ModelVersionPolicy.Latest.*", Honoured),
    ("ModelVersionPolicy.Specific.*", Honoured),
    ("ModelInstanceGroup.name", Honoured),
    ("ModelInstanceGroup.kind", Honoured),
    ("ModelInstanceGroup.count", Honoured),
    ("ModelInstanceGroup.rate_limiter", Honoured),
    ("ModelInstanceGroup.gpus", Honoured),
    (
        "ModelInstanceGroup.secondary_devices",
        Refused("secondary devices (NVDLA) do not exist here"),
    ),
    (
        "ModelInstanceGroup.profile",
        NoEffect("TensorRT optimization profiles; hosted backends are told there are none"),
    ),
    ("ModelInstanceGroup.passive", Honoured),
    ("ModelInstanceGroup.host_policy", Honoured),
    (
        "ModelInstanceGroup.SecondaryDevice.*",
        Refused("part of secondary_devices"),
    ),
    ("ModelRateLimiter.*", Honoured),
    ("ModelRateLimiter.Resource.*", Honoured),
    ("ModelOptimizationPolicy.graph", Honoured),
    ("ModelOptimizationPolicy.Graph.*", Honoured),
    (
        "ModelOptimizationPolicy.priority",
        NoEffect("GPU stream priority; no GPU here"),
    ),
    ("ModelOptimizationPolicy.cuda", NoEffect(NO_GPU)),
    ("ModelOptimizationPolicy.Cuda.*", NoEffect(NO_GPU)),
    ("ModelOptimizationPolicy.Cuda.GraphSpec.*", NoEffect(NO_GPU)),
    (
        "ModelOptimizationPolicy.Cuda.GraphSpec.Shape.*",
        NoEffect(NO_GPU),
    ),
    (
        "ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound.*",
        NoEffect(NO_GPU),
    ),
    ("ModelOptimizationPolicy.execution_accelerators", Honoured),
    (
        "ModelOptimizationPolicy.ExecutionAccelerators.gpu_execution_accelerator",
        NoEffect(NO_GPU),
    ),
    (
        "ModelOptimizationPolicy.ExecutionAccelerators.cpu_execution_accelerator",
        Refused("ONNX Runtime here has no CPU execution accelerators (OpenVINO)"),
    ),
    (
        "ModelOptimizationPolicy.ExecutionAccelerators.Accelerator.*",
        Honoured,
    ),
    (
        "ModelOptimizationPolicy.input_pinned_memory",
        NoEffect("pinned memory speeds up GPU copies; no GPU here"),
    ),
    (
        "ModelOptimizationPolicy.output_pinned_memory",
        NoEffect("pinned memory speeds up GPU copies; no GPU here"),
    ),
    (
        "ModelOptimizationPolicy.PinnedMemoryBuffer.*",
        NoEffect("pinned memory speeds up GPU copies; no GPU here"),
    ),
    (
        "ModelOptimizationPolicy.gather_kernel_buffer_threshold",
        NoEffect(NO_GPU),
    ),
    ("ModelOptimizationPolicy.eager_batching", NoEffect(TENSORRT)),
    ("ModelQueuePolicy.*", Honoured),
    ("ModelDynamicBatching.*", Honoured),
    ("ModelSequenceBatching.direct", Honoured),
    ("ModelSequenceBatching.oldest", Honoured),
    (
        "ModelSequenceBatching.max_sequence_idle_microseconds",
        Honoured,
    ),
    ("ModelSequenceBatching.control_input", Honoured),
    ("ModelSequenceBatching.state", Honoured),
    ("ModelSequenceBatching.iterative_sequence", Honoured),
    ("ModelSequenceBatching.Control.*", Honoured),
    ("ModelSequenceBatching.ControlInput.*", Honoured),
    ("ModelSequenceBatching.InitialState.*", Honoured),
    ("ModelSequenceBatching.State.input_name", Honoured),
    ("ModelSequenceBatching.State.output_name", Honoured),
    ("ModelSequenceBatching.State.data_type", Honoured),
    ("ModelSequenceBatching.State.dims", Honoured),
    ("ModelSequenceBatching.State.initial_state", Honoured),
    (
        "ModelSequenceBatching.State.use_same_buffer_for_input_output",
        Honoured,
    ),
    (
        "ModelSequenceBatching.State.use_growable_memory",
        NoEffect("a GPU buffer placement hint; state is kept in host memory"),
    ),
    ("ModelSequenceBatching.StrategyDirect.*", Honoured),
    ("ModelSequenceBatching.StrategyOldest.*", Honoured),
    ("ModelEnsembling.step", Honoured),
    ("ModelEnsembling.max_inflight_requests", Honoured),
    ("ModelEnsembling.Step.*", Honoured),
    ("ModelParameter.*", Honoured),
    ("ModelWarmup.*", Honoured),
    ("ModelWarmup.Input.*", Honoured),
    ("ModelOperations.*", Refused("part of model_operations")),
    ("ModelTransactionPolicy.*", Honoured),
    ("ModelRepositoryAgents.*", Honoured),
    ("ModelRepositoryAgents.Agent.*", Honoured),
    ("ModelResponseCache.*", Honoured),
    ("ModelMetrics.*", Honoured),
    ("ModelMetrics.MetricControl.*", Honoured),
    ("ModelMetrics.MetricControl.MetricIdentifier.*", Honoured),
    ("ModelMetrics.MetricControl.HistogramOptions.*", Honoured),
];

/// The entry for `field` of message `message` (its path without the package).
pub fn support_of(message: &str, field: &str) -> Option<Support> {
    let exact = format!("{message}.{field}");
    let any = format!("{message}.*");
    FIELDS
        .iter()
        .find(|(path, _)| *path == exact)
        .or_else(|| FIELDS.iter().find(|(path, _)| *path == any))
        .map(|(_, support)| *support)
}

/// A message's path without the `inference.` package (`ModelInstanceGroup.SecondaryDevice`).
pub fn message_path(descriptor: &MessageDescriptor) -> &str {
    let name = descriptor.full_name();
    name.strip_prefix(&format!("{}.", descriptor.package_name()))
        .unwrap_or(name)
}

/// Checks the fields `config` sets (as the user wrote it, before Triton's defaults are
/// filled in): the first refused one fails with its path (`instance_group.secondary_devices`);
/// each one without effect is logged once.
pub fn check_supported(config: &ModelConfig) -> Result<()> {
    let mut message = DynamicMessage::new(model_config_descriptor());
    message
        .transcode_from(config)
        .map_err(|e| Error::internal(format!("model configuration could not be read: {e}")))?;
    let mut found = Vec::new();
    set_fields(&message, "", &mut found);
    for (path, support) in found {
        match support {
            Honoured => {}
            NoEffect(why) => tracing::warn!(
                "model '{}': configuration field '{path}' has no effect: {why}",
                config.name
            ),
            Refused(why) => {
                return Err(Error::invalid_arg(format!(
                    "model '{}': configuration field '{path}' is not supported: {why}",
                    config.name
                )))
            }
        }
    }
    Ok(())
}

/// Every field set in `message` and its submessages, with the field's path under
/// `prefix`, deduplicated, parents before children; a field without an entry counts
/// as refused (the tests keep that from happening).
fn set_fields(message: &DynamicMessage, prefix: &str, found: &mut Vec<(String, Support)>) {
    let descriptor = message.descriptor();
    for (field, value) in message.fields() {
        let path = format!("{prefix}{}", field.name());
        let support = support_of(message_path(&descriptor), field.name())
            .unwrap_or(Refused("unknown to this build"));
        if !found.iter().any(|(p, _)| *p == path) {
            found.push((path.clone(), support));
        }
        let nested = format!("{path}.");
        match value {
            Value::Message(m) => set_fields(m, &nested, found),
            Value::List(items) => items.iter().for_each(|item| {
                if let Value::Message(m) = item {
                    set_fields(m, &nested, found);
                }
            }),
            Value::Map(entries) => entries.values().for_each(|item| {
                if let Value::Message(m) = item {
                    set_fields(m, &nested, found);
                }
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "support_tests.rs"]
mod tests;
