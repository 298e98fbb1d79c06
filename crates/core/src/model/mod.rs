//! The immutable, typed description of one loaded model version that schedulers,
//! backends, validation and frontends read. It is built once at load from the normalized
//! configuration; the protobuf `ModelConfig` stays at the edges (parsing, and the
//! configuration answers of the frontends).
//!
//! - `scheduling`: which scheduler, with its settings ([`SchedulingSpec`]).
//! - `controls` and `state`: what the sequence batcher feeds a stateful model
//!   ([`ControlSpec`], [`StateSpec`]).
//! - [`reshape`]: a tensor's `reshape`, the shape the backend sees instead of `dims`.
//! - `batch_io`: the `batch_input`s and `batch_output`s of ragged models
//!   ([`BatchInputSpec`], [`BatchOutputSpec`]).
//!
//! Every size a configuration gives that later sizes an allocation or a thread count is
//! bounded here, at load and before anything is allocated, so that an absurd value fails
//! the load with a message naming the field and the limit instead of exhausting memory:
//! [`MAX_BATCH_SIZE`], [`MAX_INSTANCES`], [`MAX_SEQUENCE_SLOTS`] and [`MAX_STATE_BYTES`].

mod batch_io;
mod controls;
pub mod reshape;
mod scheduling;
mod state;

use std::collections::BTreeMap;

use nereid_proto::inference::model_instance_group::Kind;
use nereid_proto::inference::{ModelConfig, ModelInstanceGroup};

pub use batch_io::{BatchInputKind, BatchInputSpec, BatchOutputSpec};
pub use controls::{ControlSpec, CorridSpec, SwitchSpec};
pub use scheduling::{
    DynamicBatchingSpec, QueuePolicy, SchedulingSpec, SequenceSpec, SequenceStrategy,
    MAX_SEQUENCE_SLOTS,
};
pub use state::{InitialState, StateSpec, MAX_STATE_BYTES};

use crate::error::{Error, Result};
use nereid_proto::DataType;

/// The largest `max_batch_size`. Batches are sized by the requests in them, but the
/// `direct` sequence strategy keeps one slot per batch row and backends may pad to it;
/// Triton deployments batch in the thousands at most, so 2^20 is never a real limit.
pub const MAX_BATCH_SIZE: usize = 1 << 20;

/// The most instances of one model version, all `instance_group`s together (passive
/// groups included: they are configuration mistakes waiting to be made active). Each
/// instance is an OS thread with its own backend session; a machine's cores, not its
/// configuration, bound how many are useful, and 256 is beyond any of today's hosts.
pub const MAX_INSTANCES: usize = 256;

/// The load error for configuration value `value` of `field` above `limit`, in the
/// shape every bound of the model configuration uses.
pub fn over_limit(
    model: &str,
    field: &str,
    value: impl std::fmt::Display,
    limit: impl std::fmt::Display,
) -> Error {
    Error::invalid_arg(format!(
        "model '{model}': {field} {value} exceeds the limit of {limit}"
    ))
}

/// A model input or output as the server checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Dimensions without the batch dimension; -1 is variable. Clients send and receive
    /// the tensor with these.
    pub dims: Vec<i64>,
    /// `reshape.shape`: the dimensions (batch dimension aside) the backend sees instead
    /// of `dims`, when the configuration gives one ([`reshape`]). Empty is a scalar per
    /// batch row.
    pub reshape: Option<Vec<i64>>,
    /// Inputs only: requests with different shapes may share a batch.
    pub allow_ragged_batch: bool,
    /// Inputs only: the request may omit it.
    pub optional: bool,
}

/// Where an instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceKind {
    /// On the CPU.
    Cpu,
    /// On the GPU with this device id.
    Gpu(i32),
    /// Wherever the backend decides.
    Model,
}

/// One `instance_group` entry, normalized (named, counted, `KIND_AUTO` resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceGroupSpec {
    /// Group name; instances are `<name>_<index>`.
    pub name: String,
    /// Where its instances run: `count` instances on each of these devices (one for a
    /// CPU or model group, each listed GPU for `KIND_GPU`), as Triton places them.
    pub devices: Vec<InstanceKind>,
    /// Instances per device (at least 1).
    pub count: usize,
    /// Passive instances are loaded by Triton but get no work; Nereid does not start them.
    pub passive: bool,
}

/// Everything the server needs to know about a loaded model version.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// Model name.
    pub name: String,
    /// Version number.
    pub version: i64,
    /// The platform reported in model metadata (Triton reports the backend name when no
    /// platform is set).
    pub platform: String,
    /// 0 when the model does not batch.
    pub max_batch_size: usize,
    /// Inputs in configuration order.
    pub inputs: Vec<TensorSpec>,
    /// Outputs in configuration order.
    pub outputs: Vec<TensorSpec>,
    /// Inputs the server fills and clients never send (sequence controls and state).
    pub internal_inputs: Vec<TensorSpec>,
    /// Outputs the server consumes and clients never see (sequence state).
    pub internal_outputs: Vec<TensorSpec>,
    /// `batch_input`: inputs the server computes from each batch's shapes.
    pub batch_inputs: Vec<BatchInputSpec>,
    /// `batch_output`: outputs cut into the requests by their inputs' shapes.
    pub batch_outputs: Vec<BatchOutputSpec>,
    /// The scheduler and its settings.
    pub scheduling: SchedulingSpec,
    /// Instance groups, in configuration order.
    pub instance_groups: Vec<InstanceGroupSpec>,
    /// `response_cache { enable: true }`.
    pub response_cache: bool,
    /// `model_transaction_policy { decoupled: true }`.
    pub decoupled: bool,
    /// `parameters`, by key (their `string_value`s), for the backend.
    pub parameters: BTreeMap<String, String>,
    /// `optimization.graph.level` (0 when unset).
    pub graph_optimization_level: i32,
    /// The outputs' classification labels (`label_filename`), read by the loader, which
    /// knows the model directory; empty until then.
    pub labels: crate::classification::Labels,
    /// The normalized configuration the spec was built from, for backends that read it
    /// whole (Triton backend libraries get it as JSON).
    pub config: std::sync::Arc<ModelConfig>,
}

impl TensorSpec {
    /// A tensor the server provides itself (no ragged batching, never optional).
    pub fn internal(name: &str, datatype: DataType, dims: Vec<i64>) -> Self {
        Self {
            name: name.to_string(),
            datatype,
            dims,
            reshape: None,
            allow_ragged_batch: false,
            optional: false,
        }
    }
}

impl ModelSpec {
    /// Builds the spec of `version` from a normalized, validated configuration. Errors
    /// are configuration mistakes normalization leaves to the parts that use them
    /// (sequence controls and state, data types).
    pub fn new(config: ModelConfig, version: i64) -> Result<Self> {
        let datatype = |name: &str, t: i32| {
            nereid_proto::inference::DataType::try_from(t)
                .ok()
                .and_then(DataType::from_config)
                .ok_or_else(|| {
                    Error::invalid_arg(format!(
                        "tensor '{name}' of model '{}' has an unsupported data type",
                        config.name
                    ))
                })
        };
        let inputs = config
            .input
            .iter()
            .map(|i| {
                Ok(TensorSpec {
                    name: i.name.clone(),
                    datatype: datatype(&i.name, i.data_type)?,
                    dims: i.dims.clone(),
                    reshape: i.reshape.as_ref().map(|r| r.shape.clone()),
                    allow_ragged_batch: i.allow_ragged_batch,
                    optional: i.optional,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let outputs = config
            .output
            .iter()
            .map(|o| {
                Ok(TensorSpec {
                    name: o.name.clone(),
                    datatype: datatype(&o.name, o.data_type)?,
                    dims: o.dims.clone(),
                    reshape: o.reshape.as_ref().map(|r| r.shape.clone()),
                    allow_ragged_batch: false,
                    optional: false,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let max_batch_size = usize::try_from(config.max_batch_size).unwrap_or(0);
        if max_batch_size > MAX_BATCH_SIZE {
            return Err(over_limit(
                &config.name,
                "max_batch_size",
                max_batch_size,
                MAX_BATCH_SIZE,
            ));
        }
        let instance_groups: Vec<InstanceGroupSpec> =
            config.instance_group.iter().map(instance_group).collect();
        let instances = instance_groups
            .iter()
            .fold(0usize, |sum, g| sum.saturating_add(g.instances()));
        if instances > MAX_INSTANCES {
            return Err(over_limit(
                &config.name,
                "instance_group count (all groups together)",
                instances,
                MAX_INSTANCES,
            ));
        }
        let scheduling = SchedulingSpec::from_config(&config)?;
        let (mut internal_inputs, mut internal_outputs) = (Vec::new(), Vec::new());
        if let Some(sequence) = scheduling.sequence() {
            sequence.check_slots(&config.name, max_batch_size, &instance_groups)?;
            for state in &sequence.states {
                let (input, output) = state.tensor_specs();
                internal_inputs.push(input);
                // A state output the config also lists is an ordinary output as well.
                if !outputs.iter().any(|o: &TensorSpec| o.name == output.name) {
                    internal_outputs.push(output);
                }
            }
            internal_inputs.extend(sequence.controls.tensor_specs());
        }
        let batch_inputs = batch_io::batch_inputs(&config)?;
        let batch_outputs = batch_io::batch_outputs(&config)?;
        let platform = if config.platform.is_empty() {
            config.backend.clone()
        } else {
            config.platform.clone()
        };
        Ok(Self {
            version,
            platform,
            max_batch_size,
            inputs,
            outputs,
            internal_inputs,
            internal_outputs,
            batch_inputs,
            batch_outputs,
            scheduling,
            instance_groups,
            response_cache: config.response_cache.as_ref().is_some_and(|c| c.enable),
            decoupled: config
                .model_transaction_policy
                .as_ref()
                .is_some_and(|p| p.decoupled),
            parameters: config
                .parameters
                .iter()
                .map(|(k, v)| (k.clone(), v.string_value.clone()))
                .collect(),
            graph_optimization_level: config
                .optimization
                .as_ref()
                .and_then(|o| o.graph.as_ref())
                .map_or(0, |g| g.level),
            labels: crate::classification::Labels::default(),
            config: std::sync::Arc::new(config.clone()),
            name: config.name,
        })
    }

    /// The input called `name`.
    pub fn input(&self, name: &str) -> Option<&TensorSpec> {
        self.inputs.iter().find(|t| t.name == name)
    }

    /// The output called `name`.
    pub fn output(&self, name: &str) -> Option<&TensorSpec> {
        self.outputs.iter().find(|t| t.name == name)
    }

    /// The `batch_output` that cuts output `name`, if one does.
    pub fn batch_output(&self, name: &str) -> Option<&BatchOutputSpec> {
        self.batch_outputs
            .iter()
            .find(|b| b.targets.iter().any(|t| t == name))
    }

    /// Dims as clients see them: with a leading -1 batch dimension when the model batches.
    pub fn client_dims(&self, dims: &[i64]) -> Vec<i64> {
        let mut out = Vec::with_capacity(dims.len() + 1);
        if self.max_batch_size > 0 {
            out.push(-1);
        }
        out.extend_from_slice(dims);
        out
    }
}

/// The typed form of one normalized `instance_group` (normalizing gives a `KIND_GPU`
/// group its GPUs).
fn instance_group(group: &ModelInstanceGroup) -> InstanceGroupSpec {
    let devices = match Kind::try_from(group.kind).unwrap_or(Kind::Cpu) {
        Kind::Gpu => group.gpus.iter().map(|&id| InstanceKind::Gpu(id)).collect(),
        Kind::Model => vec![InstanceKind::Model],
        Kind::Cpu | Kind::Auto => vec![InstanceKind::Cpu],
    };
    InstanceGroupSpec {
        name: group.name.clone(),
        devices,
        count: usize::try_from(group.count.max(1)).unwrap_or(1),
        passive: group.passive,
    }
}

impl InstanceGroupSpec {
    /// How many instances the group makes: `count` on each of its devices.
    pub fn instances(&self) -> usize {
        self.count.saturating_mul(self.devices.len())
    }
}

/// Formats dims as Triton does: `[-1,4]`.
pub fn format_dims(dims: &[i64]) -> String {
    let inner: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", inner.join(","))
}

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod tests;
