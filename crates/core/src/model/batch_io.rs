//! `batch_input` and `batch_output`: the tensors a ragged model needs to find each
//! request in a batch whose ragged inputs are concatenated end to end. The server
//! computes the batch inputs from the requests' shapes and cuts a batch output back
//! into the requests' shapes (Triton's `docs/user_guide/ragged_batching.md`); the
//! configuration is validated with Triton's words before any of this is built.

use nereid_proto::inference::batch_input::Kind as ConfigInputKind;
use nereid_proto::inference::batch_output::Kind as ConfigOutputKind;
use nereid_proto::inference::{DataType as ConfigDataType, ModelConfig};

use std::collections::HashSet;

use crate::error::{Error, Result};
use nereid_proto::DataType;

/// What a batch input holds, for each request of the batch in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchInputKind {
    /// The source input's element count (`[requests]`).
    ElementCount,
    /// The running sum of the element counts (`[requests]`).
    AccumulatedElementCount,
    /// The running sum after a leading 0 (`[requests + 1]`).
    AccumulatedElementCountWithZero,
    /// No data: the shape `[largest element count]` is the information.
    MaxElementCountAsShape,
    /// Each batch item's shape without its batch dimension (`[items, rank - 1]`).
    ItemShape,
    /// The same values, flattened (`[items * (rank - 1)]`).
    ItemShapeFlatten,
}

/// One `batch_input` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchInputSpec {
    /// What it holds.
    pub kind: BatchInputKind,
    /// The model inputs fed with it (each gets the same tensor).
    pub targets: Vec<String>,
    /// `TYPE_INT32` or `TYPE_FP32`.
    pub datatype: DataType,
    /// The request input whose shapes it describes.
    pub source: String,
}

/// One `batch_output` entry (`BATCH_SCATTER_WITH_INPUT_SHAPE`, the only kind): the
/// model's output for the whole batch is cut into one part per request, each shaped
/// like the request's source input wherever the output's configured shape is variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutputSpec {
    /// The model outputs cut this way.
    pub targets: Vec<String>,
    /// The request input whose shape each part takes.
    pub source: String,
    /// The configured shape of the target (its `reshape` if any), after a -1 batch
    /// dimension when the model batches: each -1 takes the source input's dimension
    /// at the same position.
    pub shape: Vec<i64>,
}

/// The `batch_input` entries of `config`, typed, checked as Triton's `ValidateBatchIO`
/// checks them (with its messages): one source input naming a configured input,
/// `TYPE_INT32` or `TYPE_FP32`.
pub(super) fn batch_inputs(config: &ModelConfig) -> Result<Vec<BatchInputSpec>> {
    config
        .batch_input
        .iter()
        .map(|entry| {
            let config_kind = ConfigInputKind::try_from(entry.kind).map_err(|_| {
                Error::invalid_arg(format!("unknown batch input kind '{}'", entry.kind))
            })?;
            let kind = match config_kind {
                ConfigInputKind::BatchElementCount => BatchInputKind::ElementCount,
                ConfigInputKind::BatchAccumulatedElementCount => {
                    BatchInputKind::AccumulatedElementCount
                }
                ConfigInputKind::BatchAccumulatedElementCountWithZero => {
                    BatchInputKind::AccumulatedElementCountWithZero
                }
                ConfigInputKind::BatchMaxElementCountAsShape => {
                    BatchInputKind::MaxElementCountAsShape
                }
                ConfigInputKind::BatchItemShape => BatchInputKind::ItemShape,
                ConfigInputKind::BatchItemShapeFlatten => BatchInputKind::ItemShapeFlatten,
            };
            let source = one_source(
                config,
                "batch input",
                config_kind.as_str_name(),
                &entry.source_input,
            )?;
            let datatype = match ConfigDataType::try_from(entry.data_type) {
                Ok(ConfigDataType::TypeInt32) => DataType::Int32,
                Ok(ConfigDataType::TypeFp32) => DataType::Fp32,
                _ => {
                    return Err(Error::invalid_arg(
                        "batch input data type must be TYPE_INT32 or TYPE_FP32",
                    ))
                }
            };
            Ok(BatchInputSpec {
                kind,
                targets: entry.target_name.clone(),
                datatype,
                source,
            })
        })
        .collect()
}

/// The `batch_output` entries of `config`, with their targets' shapes, checked as
/// Triton's `ValidateBatchIO` checks them: one source input naming a configured
/// input, targets naming configured outputs, each once.
pub(super) fn batch_outputs(config: &ModelConfig) -> Result<Vec<BatchOutputSpec>> {
    config
        .batch_output
        .iter()
        .map(|entry| {
            let kind = ConfigOutputKind::try_from(entry.kind).map_err(|_| {
                Error::invalid_arg(format!("unknown batch output kind '{}'", entry.kind))
            })?;
            let source = one_source(
                config,
                "batch output",
                kind.as_str_name(),
                &entry.source_input,
            )?;
            let mut seen = HashSet::new();
            for target in &entry.target_name {
                if !config.output.iter().any(|o| &o.name == target) {
                    return Err(Error::invalid_arg(format!(
                        "unknown target output name '{target}'"
                    )));
                }
                if !seen.insert(target) {
                    return Err(Error::invalid_arg(format!(
                        "target output name '{target}' can only be specified once"
                    )));
                }
            }
            let mut shape = Vec::new();
            if config.max_batch_size > 0 {
                shape.push(-1);
            }
            let target = entry.target_name.first();
            if let Some(output) = config.output.iter().find(|o| Some(&o.name) == target) {
                // Triton cannot size such parts either; say so at load, not per request.
                if output.data_type == ConfigDataType::TypeString as i32 {
                    return Err(Error::invalid_arg(format!(
                        "batch output '{}' must have a fixed-size data type, not TYPE_STRING",
                        output.name
                    )));
                }
                match &output.reshape {
                    Some(reshape) => shape.extend_from_slice(&reshape.shape),
                    None => shape.extend_from_slice(&output.dims),
                }
            }
            Ok(BatchOutputSpec {
                targets: entry.target_name.clone(),
                source,
                shape,
            })
        })
        .collect()
}

/// The one source input of an entry, which must be a configured input.
fn one_source(config: &ModelConfig, what: &str, kind: &str, sources: &[String]) -> Result<String> {
    let [source] = sources else {
        return Err(Error::invalid_arg(format!(
            "{what} kind '{kind}' expects 1 source input, got {}",
            sources.len()
        )));
    };
    if !config.input.iter().any(|i| &i.name == source) {
        return Err(Error::invalid_arg(format!(
            "unknown source input name '{source}'"
        )));
    }
    Ok(source.clone())
}
