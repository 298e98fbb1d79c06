//! The immutable description of one loaded model version that schedulers, validation and
//! frontends read: the normalized configuration plus typed views of its inputs and outputs.

use nereid_proto::inference::model_config::SchedulingChoice;
use nereid_proto::inference::ModelConfig;

use crate::config::config_to_json;
use crate::error::{Error, Result};
use crate::scheduler::sequence::controls::Controls;
use crate::scheduler::sequence::state::state_tensor_specs;
use crate::DataType;

/// A model input or output as the server checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub datatype: DataType,
    /// Dimensions without the batch dimension; -1 is variable.
    pub dims: Vec<i64>,
    /// Inputs only: requests with different shapes may share a batch.
    pub allow_ragged_batch: bool,
    /// Inputs only: the request may omit it.
    pub optional: bool,
}

/// Everything the server needs to know about a loaded model version.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// Model name.
    pub name: String,
    /// Version number.
    pub version: i64,
    /// The normalized configuration.
    pub config: ModelConfig,
    /// The configuration in Triton's JSON form, rendered once at load.
    pub config_json: serde_json::Value,
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
}

impl TensorSpec {
    /// A tensor the server provides itself (no ragged batching, never optional).
    pub fn internal(name: &str, datatype: DataType, dims: Vec<i64>) -> Self {
        Self {
            name: name.to_string(),
            datatype,
            dims,
            allow_ragged_batch: false,
            optional: false,
        }
    }
}

impl ModelSpec {
    /// Builds the spec of `version` from a normalized, validated configuration.
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
                    allow_ragged_batch: false,
                    optional: false,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let (internal_inputs, internal_outputs) = match &config.scheduling_choice {
            Some(SchedulingChoice::SequenceBatching(seq)) => {
                let controls = Controls::new(seq, &config.name, config.max_batch_size > 0)?;
                let (mut inputs, outputs) = state_tensor_specs(seq)?;
                inputs.extend(controls.tensor_specs());
                (inputs, outputs)
            }
            _ => (Vec::new(), Vec::new()),
        };
        Ok(Self {
            name: config.name.clone(),
            version,
            internal_inputs,
            internal_outputs,
            config_json: config_to_json(&config),
            max_batch_size: usize::try_from(config.max_batch_size).unwrap_or(0),
            config,
            inputs,
            outputs,
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

    /// The platform string reported in model metadata (Triton reports the backend name when
    /// no platform is set).
    pub fn platform(&self) -> &str {
        if self.config.platform.is_empty() {
            &self.config.backend
        } else {
            &self.config.platform
        }
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
