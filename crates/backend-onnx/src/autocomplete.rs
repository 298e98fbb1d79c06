//! Completing a missing or partial configuration from the ONNX model, as Triton's ONNX
//! Runtime backend does: inputs and outputs that the config leaves out are taken from the
//! model, and a model whose tensors all have a variable first dimension batches
//! (`max_batch_size` = the backend's default) when the config did not say otherwise.

use ort::session::Session;
use ort::value::ValueType;

use nereid_core::config::ModelConfig;
use nereid_core::{DataType, Error, Result};
use nereid_proto::inference::model_config::SchedulingChoice;
use nereid_proto::inference::{ModelDynamicBatching, ModelInput, ModelOutput};

use crate::convert::protocol_type;

/// A tensor of an ONNX model as the server sees it.
#[derive(Debug, Clone)]
pub struct ModelTensor {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub datatype: DataType,
    /// Its dimensions, -1 where variable.
    pub dims: Vec<i64>,
}

/// Fills `config` from `session`'s model.
pub fn complete(config: &mut ModelConfig, session: &Session, default_max_batch: i32) -> Result<()> {
    let inputs = tensors(&config.name, session.inputs())?;
    let outputs = tensors(&config.name, session.outputs())?;
    let fill_io = config.input.is_empty() || config.output.is_empty();
    let all_batched = inputs
        .iter()
        .chain(&outputs)
        .all(|t| t.dims.first() == Some(&-1));
    if fill_io && !all_batched && config.max_batch_size != 0 {
        return Err(Error::invalid_arg(format!(
            "autofill failed for model '{}': model does not support batching while non-zero max_batch_size is specified",
            config.name
        )));
    }
    if config.max_batch_size == 0 && fill_io && all_batched && default_max_batch > 0 {
        config.max_batch_size = default_max_batch;
        // Triton's backend also turns dynamic batching on for a model it made batching.
        if config.scheduling_choice.is_none() {
            config.scheduling_choice =
                Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching {
                    preferred_batch_size: vec![default_max_batch],
                    ..Default::default()
                }));
        }
    }
    let strip = usize::from(config.max_batch_size > 0);
    let dims = |t: &ModelTensor| t.dims.iter().skip(strip).copied().collect::<Vec<_>>();
    if config.input.is_empty() {
        config.input = inputs
            .iter()
            .map(|t| ModelInput {
                name: t.name.clone(),
                data_type: t.datatype.to_config() as i32,
                dims: dims(t),
                ..Default::default()
            })
            .collect();
    }
    if config.output.is_empty() {
        config.output = outputs
            .iter()
            .map(|t| ModelOutput {
                name: t.name.clone(),
                data_type: t.datatype.to_config() as i32,
                dims: dims(t),
                ..Default::default()
            })
            .collect();
    }
    Ok(())
}

/// The tensors of `outlets` (a session's inputs or outputs) of model `model`.
pub fn tensors(model: &str, outlets: &[ort::value::Outlet]) -> Result<Vec<ModelTensor>> {
    outlets
        .iter()
        .map(|outlet| tensor(model, outlet.name(), outlet.dtype()))
        .collect()
}

/// The graph value `name` of model `model`, of type `dtype`, as a tensor; an error when
/// it is not a tensor or its element type has no Triton equivalent.
pub fn tensor(model: &str, name: &str, dtype: &ValueType) -> Result<ModelTensor> {
    match dtype {
        ValueType::Tensor { ty, shape, .. } => {
            let datatype = protocol_type(*ty).ok_or_else(|| {
                Error::invalid_arg(format!(
                    "model '{model}': tensor '{name}' has ONNX type {ty:?}, which has no Triton equivalent"
                ))
            })?;
            Ok(ModelTensor {
                name: name.to_string(),
                datatype,
                dims: shape.iter().map(|&d| if d < 0 { -1 } else { d }).collect(),
            })
        }
        other => Err(Error::invalid_arg(format!(
            "model '{model}': '{name}' is a {other:?}, but only tensors are supported"
        ))),
    }
}
