//! Triton's shape rules for a configured tensor against the graph (`ValidateInputs` /
//! `ValidateOutputs` and `CompareDimsSupported` in the ONNX Runtime backend). The shape
//! compared is the tensor's `reshape` when it has one (what the model sees), else its
//! `dims`, after a -1 batch dimension when the model batches.

use nereid_core::model::{format_dims, ModelSpec, TensorSpec};
use nereid_core::{Error, Result};

use super::Side;

/// Triton's shape rules for one tensor whose graph shape is `model_shape`: a ragged
/// input must be `[-1]` in the graph; a scalar in the graph takes only 1s in the
/// configuration; any other shape goes through [`compare_dims`], exactly for outputs
/// and with the graph's variable dimensions accepting anything for inputs.
pub(super) fn check_shape(
    spec: &ModelSpec,
    side: Side,
    tensor: &TensorSpec,
    model_shape: &[i64],
) -> Result<()> {
    let model = &spec.name;
    let name = &tensor.name;
    if side == Side::Input && tensor.allow_ragged_batch {
        if model_shape != [-1] {
            return Err(Error::invalid_arg(format!(
                "unable to load model '{model}', configuration expects model provides input with shape [-1]  for ragged input '{name}', model provides {}",
                format_dims(model_shape)
            )));
        }
        return Ok(());
    }
    let dims = tensor.reshape.as_deref().unwrap_or(&tensor.dims);
    if model_shape.is_empty() {
        if dims.iter().any(|&d| d != 1) {
            return Err(Error::invalid_arg(format!(
                "unable to load model '{model}', scalar tensor '{name}', should only provide 1 in the model configuration when the model doesn't support batching. Model configuration provided: {}.",
                format_dims(dims)
            )));
        }
        return Ok(());
    }
    compare_dims(
        model,
        name,
        model_shape,
        dims,
        spec.max_batch_size > 0,
        side == Side::Output,
    )
}

/// Triton's `CompareDimsSupported` (onnxruntime_backend `src/onnxruntime_utils.cc`):
/// the graph's shape against the configured one (with a -1 batch dimension in front when
/// the model batches, which the graph must then have too). A -1 in the graph matches any
/// configured dimension unless `exact`.
fn compare_dims(
    model: &str,
    name: &str,
    model_shape: &[i64],
    dims: &[i64],
    batching: bool,
    exact: bool,
) -> Result<()> {
    let agree = |full: &[i64]| {
        model_shape.len() == full.len()
            && model_shape
                .iter()
                .zip(full)
                .all(|(&m, &c)| (!exact && m == -1) || m == c)
    };
    if !batching {
        if agree(dims) {
            return Ok(());
        }
        return Err(Error::invalid_arg(format!(
            "model '{model}', tensor '{name}': the model expects {} dimensions (shape {}) but the model configuration specifies {} dimensions (shape {})",
            model_shape.len(),
            format_dims(model_shape),
            dims.len(),
            format_dims(dims)
        )));
    }
    if model_shape.first() != Some(&-1) {
        return Err(Error::invalid_arg(format!(
            "model '{model}', tensor '{name}': for the model to support batching the shape should have at least 1 dimension and the first dimension must be -1; but shape expected by the model is {}",
            format_dims(model_shape)
        )));
    }
    let full: Vec<i64> = std::iter::once(-1).chain(dims.iter().copied()).collect();
    if agree(&full) {
        return Ok(());
    }
    Err(Error::invalid_arg(format!(
        "model '{model}', tensor '{name}': the model expects {} dimensions (shape {}) but the model configuration specifies {} dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, making complete shape {})",
        model_shape.len(),
        format_dims(model_shape),
        full.len(),
        format_dims(&full)
    )))
}
