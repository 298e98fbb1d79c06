//! What the benchmark learns from the server about the model, and how it turns that into
//! concrete input shapes.
//!
//! The model metadata gives names, datatypes and shapes; the model config gives
//! `max_batch_size`, which says whether the metadata's leading `-1` is the batch
//! dimension (it is exactly when `max_batch_size > 0`, as in Triton).

use anyhow::{bail, Result};

use crate::cli::ShapeOverride;
use crate::data::DataType;

/// One tensor of the model metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMeta {
    /// Tensor name.
    pub name: String,
    /// Datatype name as the server spelt it.
    pub datatype: String,
    /// Shape; `-1` marks a variable dimension (and the batch dimension of batching models).
    pub shape: Vec<i64>,
}

/// Model metadata and the part of the config the benchmark needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// Inputs in metadata order.
    pub inputs: Vec<TensorMeta>,
    /// Outputs in metadata order.
    pub outputs: Vec<TensorMeta>,
    /// The config's `max_batch_size`; 0 for a model that does not batch.
    pub max_batch_size: u32,
}

/// An input with its concrete full shape (batch dimension included where the model batches).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// Input name.
    pub name: String,
    /// Datatype.
    pub datatype: DataType,
    /// Full shape sent on the wire.
    pub shape: Vec<i64>,
}

impl InputSpec {
    /// Number of elements: the product of the shape.
    pub fn elements(&self) -> usize {
        self.shape.iter().map(|&d| d.max(0) as usize).product()
    }
}

/// Resolves every input's wire shape from the metadata, the batch size and `--shape`.
///
/// Errors name the input and say what to pass: a variable dimension without `--shape`, an
/// override that contradicts a fixed dimension, an override for an unknown input, a batch
/// size the model cannot take, or a datatype this tool does not know.
pub fn resolve_inputs(
    info: &ModelInfo,
    batch_size: u32,
    overrides: &[ShapeOverride],
) -> Result<Vec<InputSpec>> {
    let batching = info.max_batch_size > 0;
    if !batching && batch_size > 1 {
        bail!("the model does not support batching (max_batch_size 0), so --batch-size must be 1");
    }
    if batching && batch_size > info.max_batch_size {
        bail!(
            "--batch-size {batch_size} exceeds the model's max_batch_size {}",
            info.max_batch_size
        );
    }
    for o in overrides {
        if !info.inputs.iter().any(|i| i.name == o.name) {
            bail!(
                "--shape names '{}', which is not an input of the model",
                o.name
            );
        }
    }
    info.inputs
        .iter()
        .map(|input| {
            let datatype = DataType::parse(&input.datatype).ok_or_else(|| {
                anyhow::anyhow!(
                    "input '{}' has datatype '{}', which nereid-bench does not know",
                    input.name,
                    input.datatype
                )
            })?;
            let dims = if batching {
                match input.shape.split_first() {
                    Some((_, rest)) => rest,
                    None => bail!(
                        "input '{}' of a batching model has an empty shape in the metadata",
                        input.name
                    ),
                }
            } else {
                &input.shape[..]
            };
            let dims = apply_override(&input.name, dims, overrides)?;
            let mut shape = Vec::with_capacity(dims.len() + 1);
            if batching {
                shape.push(i64::from(batch_size));
            }
            shape.extend(dims);
            Ok(InputSpec {
                name: input.name.clone(),
                datatype,
                shape,
            })
        })
        .collect()
}

/// Bytes to reserve for each output in shared memory: `size` for all when given, else
/// each output's fixed size from the metadata (its batch dimension set to `batch_size`).
/// An output with a variable dimension or of type BYTES needs `size`.
pub fn output_sizes(info: &ModelInfo, batch_size: u32, size: Option<u64>) -> Result<Vec<u64>> {
    let batching = info.max_batch_size > 0;
    info.outputs
        .iter()
        .map(|output| {
            if let Some(size) = size {
                return Ok(size);
            }
            let need = |why: &str| {
                anyhow::anyhow!(
                    "output '{}' {why}, so its size is unknown: pass --output-shared-memory-size",
                    output.name
                )
            };
            let element = DataType::parse(&output.datatype)
                .and_then(DataType::element_size)
                .ok_or_else(|| need(&format!("has datatype '{}'", output.datatype)))?;
            let dims = match (batching, output.shape.split_first()) {
                (true, Some((_, rest))) => rest,
                _ => &output.shape[..],
            };
            if dims.iter().any(|&d| d < 0) {
                return Err(need("has a variable dimension"));
            }
            let batch = if batching { u64::from(batch_size) } else { 1 };
            Ok(dims.iter().map(|&d| d as u64).product::<u64>() * batch * element as u64)
        })
        .collect()
}

/// The concrete non-batch dims of one input: the model's dims with `--shape` applied.
fn apply_override(name: &str, dims: &[i64], overrides: &[ShapeOverride]) -> Result<Vec<i64>> {
    let Some(o) = overrides.iter().rev().find(|o| o.name == name) else {
        if dims.iter().any(|&d| d < 0) {
            bail!(
                "input '{name}' has variable shape {dims:?}; give its shape without the batch \
                 dimension with --shape {name}:d1,d2,..."
            );
        }
        return Ok(dims.to_vec());
    };
    if o.dims.len() != dims.len() {
        bail!(
            "--shape {name} has {} dimensions but the model's shape {dims:?} has {} \
             (leave out the batch dimension)",
            o.dims.len(),
            dims.len()
        );
    }
    for (&given, &model) in o.dims.iter().zip(dims) {
        if model >= 0 && given != model {
            bail!(
                "--shape {name}:{:?} contradicts the model's shape {dims:?}",
                o.dims
            );
        }
    }
    Ok(o.dims.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(max_batch_size: u32, shape: Vec<i64>) -> ModelInfo {
        ModelInfo {
            inputs: vec![TensorMeta {
                name: "IN".into(),
                datatype: "FP32".into(),
                shape,
            }],
            outputs: vec![],
            max_batch_size,
        }
    }

    fn over(dims: Vec<i64>) -> Vec<ShapeOverride> {
        vec![ShapeOverride {
            name: "IN".into(),
            dims,
        }]
    }

    #[test]
    fn output_sizes_from_metadata_or_flag() {
        let mut model = info(8, vec![-1, 4]);
        model.outputs = vec![TensorMeta {
            name: "OUT".into(),
            datatype: "FP32".into(),
            shape: vec![-1, 4],
        }];
        assert_eq!(output_sizes(&model, 2, None).expect("fixed"), vec![32]);
        assert_eq!(output_sizes(&model, 2, Some(100)).expect("flag"), vec![100]);
        model.outputs[0].shape = vec![-1, -1];
        let e = output_sizes(&model, 2, None).expect_err("variable");
        assert!(e.to_string().contains("--output-shared-memory-size"));
        model.outputs[0].shape = vec![-1, 4];
        model.outputs[0].datatype = "BYTES".into();
        assert!(output_sizes(&model, 2, None).is_err());
    }

    #[test]
    fn batching_model_gets_batch_dim() {
        let specs = resolve_inputs(&info(8, vec![-1, 4]), 3, &[]).expect("resolves");
        assert_eq!(specs[0].shape, vec![3, 4]);
        assert_eq!(specs[0].elements(), 12);
    }

    #[test]
    fn non_batching_model_keeps_shape() {
        let specs = resolve_inputs(&info(0, vec![2, 4]), 1, &[]).expect("resolves");
        assert_eq!(specs[0].shape, vec![2, 4]);
        assert!(resolve_inputs(&info(0, vec![2, 4]), 2, &[]).is_err());
    }

    #[test]
    fn batch_size_above_max_is_refused() {
        assert!(resolve_inputs(&info(4, vec![-1, 4]), 8, &[]).is_err());
    }

    #[test]
    fn variable_dims_need_an_override() {
        let err = resolve_inputs(&info(4, vec![-1, -1]), 1, &[]).expect_err("needs --shape");
        assert!(err.to_string().contains("--shape IN"));
        let specs = resolve_inputs(&info(4, vec![-1, -1]), 2, &over(vec![7])).expect("resolves");
        assert_eq!(specs[0].shape, vec![2, 7]);
    }

    #[test]
    fn override_must_agree_with_fixed_dims() {
        assert!(resolve_inputs(&info(4, vec![-1, 4]), 1, &over(vec![5])).is_err());
        assert!(resolve_inputs(&info(4, vec![-1, 4]), 1, &over(vec![4, 1])).is_err());
        assert!(resolve_inputs(&info(4, vec![-1, 4]), 1, &over(vec![4])).is_ok());
    }

    #[test]
    fn override_of_unknown_input_is_refused() {
        let o = vec![ShapeOverride {
            name: "NOPE".into(),
            dims: vec![1],
        }];
        assert!(resolve_inputs(&info(4, vec![-1, 4]), 1, &o).is_err());
    }
}
