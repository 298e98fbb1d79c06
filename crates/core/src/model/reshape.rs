//! `reshape` on a configured input or output, as Triton applies it: clients send and
//! receive the tensor with the configuration's `dims` (after the batch dimension when
//! the model batches), while the backend sees it with `reshape.shape` (the batch
//! dimension kept in front). The element count is the same; the variable-size (-1)
//! dimensions of one layout take their values, in order, from those of the other
//! (Triton core's `InferenceRequest::Normalize` for inputs and
//! `InferenceResponse::Output::Reshape` for outputs). Configurations are checked at load
//! (`config::normalize`), so the two layouts always agree on element counts.

use super::format_dims;
use super::{ModelSpec, TensorSpec};
use crate::error::{Error, Result};
use crate::request::{InputTensor, OutputTensor};

/// `shape` (with a leading batch dimension when `batched`) moved from the `from` layout
/// to the `to` layout: the batch dimension is kept and each -1 of `to` takes the value
/// of the matching -1 of `from` in `shape`, in order. `None` when `shape` is not in the
/// `from` layout (another rank, or a fixed dimension that differs).
pub fn convert_shape(shape: &[i64], batched: bool, from: &[i64], to: &[i64]) -> Option<Vec<i64>> {
    let (batch, rest) = if batched {
        let (first, rest) = shape.split_first()?;
        (Some(*first), rest)
    } else {
        (None, shape)
    };
    if rest.len() != from.len() {
        return None;
    }
    let mut variable = Vec::new();
    for (&got, &want) in rest.iter().zip(from) {
        if want == -1 {
            variable.push(got);
        } else if got != want {
            return None;
        }
    }
    let mut variable = variable.into_iter();
    let mut out = Vec::with_capacity(to.len() + usize::from(batched));
    out.extend(batch);
    for &dim in to {
        out.push(if dim == -1 { variable.next()? } else { dim });
    }
    // Every -1 of `from` must have found its place in `to`.
    variable.next().is_none().then_some(out)
}

impl TensorSpec {
    /// The shape the backend sees for this tensor when clients give (or get) `shape`:
    /// `shape` itself without a `reshape`, or when it does not have the `dims` layout
    /// (which validation rules out for requests).
    pub fn model_shape(&self, shape: &[i64], batched: bool) -> Vec<i64> {
        self.reshape
            .as_deref()
            .and_then(|reshape| convert_shape(shape, batched, &self.dims, reshape))
            .unwrap_or_else(|| shape.to_vec())
    }

    /// The shape clients get for this tensor when the backend produced `shape`, or
    /// `None` when `shape` is not in the `reshape` layout.
    pub fn client_shape(&self, shape: &[i64], batched: bool) -> Option<Vec<i64>> {
        match &self.reshape {
            None => Some(shape.to_vec()),
            Some(reshape) => convert_shape(shape, batched, reshape, &self.dims),
        }
    }
}

impl ModelSpec {
    /// Whether any client input or output has a `reshape`.
    pub fn has_reshape(&self) -> bool {
        self.inputs
            .iter()
            .chain(&self.outputs)
            .any(|t| t.reshape.is_some())
    }

    /// The shape the backend sees for input `name` given with `shape` (unchanged for
    /// internal inputs and inputs without a `reshape`).
    pub fn input_model_shape(&self, name: &str, shape: &[i64]) -> Vec<i64> {
        match self.input(name) {
            Some(tensor) => tensor.model_shape(shape, self.max_batch_size > 0),
            None => shape.to_vec(),
        }
    }

    /// Request inputs as the model sees them (an ensemble's own `reshape`, before its
    /// steps run).
    pub fn reshape_inputs(&self, inputs: &mut [InputTensor]) {
        for input in inputs {
            if self.input(&input.name).is_some_and(|t| t.reshape.is_some()) {
                input.shape = self.input_model_shape(&input.name, &input.shape);
            }
        }
    }

    /// Outputs the model produced in their `reshape` layout, given the configuration's
    /// `dims` layout that clients get. An output not in its `reshape` layout is an
    /// internal error: answering it would give clients a shape that disagrees with the
    /// model configuration and the data.
    pub fn reshape_outputs(&self, outputs: &mut [OutputTensor]) -> Result<()> {
        let batched = self.max_batch_size > 0;
        for output in outputs {
            let Some(tensor) = self.output(&output.name) else {
                continue;
            };
            let Some(reshape) = &tensor.reshape else {
                continue;
            };
            output.shape = tensor.client_shape(&output.shape, batched).ok_or_else(|| {
                Error::internal(format!(
                    "output '{}' of model '{}' has shape {}, which does not match its reshape {}",
                    output.name,
                    self.name,
                    format_dims(&output.shape),
                    format_dims(&self.client_dims(reshape))
                ))
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use nereid_proto::DataType;

    #[test]
    fn shapes_move_between_layouts_with_the_batch_dimension_kept() {
        // densenet: [3,224,224] <-> [1,3,224,224], no batching.
        assert_eq!(
            convert_shape(&[3, 224, 224], false, &[3, 224, 224], &[1, 3, 224, 224]),
            Some(vec![1, 3, 224, 224])
        );
        assert_eq!(
            convert_shape(&[1, 1000, 1, 1], false, &[1, 1000, 1, 1], &[1000]),
            Some(vec![1000])
        );
        // Batching: the batch dimension stays in front.
        assert_eq!(
            convert_shape(&[5, 3, 4, 4], true, &[3, 4, 4], &[3, 16]),
            Some(vec![5, 3, 16])
        );
        // Variable-size dimensions keep their values, in order.
        assert_eq!(
            convert_shape(&[2, 4, 7, 6], false, &[2, 4, -1, 6], &[8, -1, 1, 6]),
            Some(vec![8, 7, 1, 6])
        );
        assert_eq!(
            convert_shape(&[3, 5, 2, 9], true, &[-1, 2, -1], &[-1, 1, 2, -1]),
            Some(vec![3, 5, 1, 2, 9])
        );
        // An empty reshape is a scalar per batch row, and back.
        assert_eq!(convert_shape(&[4, 1], true, &[1], &[]), Some(vec![4]));
        assert_eq!(convert_shape(&[4], true, &[], &[1]), Some(vec![4, 1]));
    }

    #[test]
    fn shapes_in_another_layout_do_not_convert() {
        assert_eq!(convert_shape(&[3, 4], false, &[3, 4, 1], &[12]), None);
        assert_eq!(convert_shape(&[3, 5], false, &[3, 4], &[12]), None);
        assert_eq!(convert_shape(&[], true, &[1], &[]), None);
        // Unequal numbers of -1 (load validation rules these configurations out).
        assert_eq!(convert_shape(&[3], false, &[-1], &[-1, -1]), None);
        assert_eq!(convert_shape(&[3, 4], false, &[-1, -1], &[-1]), None);
    }

    fn reshaped(max_batch_size: u32) -> ModelSpec {
        let spec = testing::spec(
            "m",
            &format!(
                r#"backend: "identity" max_batch_size: {max_batch_size}
                   input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 3, 4, 4 ] reshape {{ shape: [ 1, 3, 4, 4 ] }} }},
                           {{ name: "PLAIN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
                   output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 10 ] reshape {{ shape: [ 1, 10, 1, 1 ] }} }},
                            {{ name: "PLAIN_OUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]"#
            ),
        );
        (*spec).clone()
    }

    fn output(name: &str, shape: &[i64]) -> OutputTensor {
        OutputTensor {
            name: name.into(),
            datatype: DataType::Fp32,
            shape: shape.to_vec(),
            data: bytes::Bytes::new(),
            device: None,
        }
    }

    #[test]
    fn the_spec_keeps_reshape_and_maps_inputs_and_outputs() {
        let spec = reshaped(0);
        assert!(spec.has_reshape());
        assert_eq!(spec.inputs[0].reshape, Some(vec![1, 3, 4, 4]));
        assert_eq!(spec.inputs[1].reshape, None);
        assert_eq!(spec.input_model_shape("IN", &[3, 4, 4]), vec![1, 3, 4, 4]);
        assert_eq!(spec.input_model_shape("PLAIN", &[2]), vec![2]);
        assert_eq!(spec.input_model_shape("STATE", &[7]), vec![7]);
        let mut outputs = vec![output("OUT", &[1, 10, 1, 1]), output("PLAIN_OUT", &[2])];
        spec.reshape_outputs(&mut outputs)
            .expect("in the reshape layout");
        assert_eq!(outputs[0].shape, vec![10]);
        assert_eq!(outputs[1].shape, vec![2]);

        let batching = reshaped(8);
        assert_eq!(
            batching.input_model_shape("IN", &[2, 3, 4, 4]),
            vec![2, 1, 3, 4, 4]
        );
        let mut outputs = vec![output("OUT", &[2, 1, 10, 1, 1])];
        batching.reshape_outputs(&mut outputs).expect("batched");
        assert_eq!(outputs[0].shape, vec![2, 10]);
    }

    #[test]
    fn an_output_outside_its_reshape_is_an_internal_error() {
        let mut outputs = vec![output("OUT", &[1, 12, 1, 1])];
        let err = reshaped(0).reshape_outputs(&mut outputs).unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::Internal);
        assert_eq!(
            err.message(),
            "output 'OUT' of model 'm' has shape [1,12,1,1], which does not match its reshape [1,10,1,1]"
        );
        let mut outputs = vec![output("OUT", &[2, 10])];
        let err = reshaped(8).reshape_outputs(&mut outputs).unwrap_err();
        assert!(
            err.message().ends_with("its reshape [-1,1,10,1,1]"),
            "{}",
            err.message()
        );
    }
}
