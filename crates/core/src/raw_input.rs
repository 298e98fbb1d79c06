//! The raw binary request of the binary tensor data extension: a body that is nothing but
//! the bytes of the model's single input. Name, datatype and shape come from the model
//! configuration, by Triton's rules (core `InferenceRequest::Normalize`), so the request
//! then goes through the same validation as any other.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::request::InputTensor;
use crate::validate::request_prefix;
use nereid_proto::DataType;

/// The input tensor a raw request's `data` stands for in `spec`. A raw request carries no
/// id, so messages have Triton's `[request id: <id_unknown>] ` prefix.
pub fn raw_input(spec: &ModelSpec, data: Bytes) -> Result<InputTensor> {
    deduce(spec, data).map_err(|e| e.prefixed(&request_prefix("")))
}

fn deduce(spec: &ModelSpec, data: Bytes) -> Result<InputTensor> {
    let [input] = spec.inputs.as_slice() else {
        return Err(Error::invalid_arg(format!(
            "Raw request must only have 1 input (found 1) to be deduced but got {} inputs in '{}' model configuration",
            spec.inputs.len(),
            spec.name
        )));
    };
    let mut shape = Vec::with_capacity(input.dims.len() + 1);
    if spec.max_batch_size != 0 {
        shape.push(1);
    }
    let mut variable_axis = None;
    let mut fixed_elements: usize = 1;
    for &dim in &input.dims {
        if dim < 0 {
            if variable_axis.is_some() {
                return Err(Error::invalid_arg(format!(
                    "The shape of the raw input '{}' can not be deduced because there are more than one variable-sized dimension",
                    input.name
                )));
            }
            variable_axis = Some(shape.len());
        } else {
            fixed_elements = fixed_elements.saturating_mul(usize::try_from(dim).unwrap_or(0));
        }
        shape.push(dim);
    }
    let data = if input.datatype == DataType::Bytes {
        if variable_axis.is_some() || fixed_elements != 1 {
            return Err(Error::invalid_arg(format!(
                "For BYTE datatype raw input '{}', the model must have input shape [1]",
                input.name
            )));
        }
        // One BYTES element: the length prefix Triton's encoding puts before each element.
        let length = u32::try_from(data.len()).map_err(|_| {
            Error::invalid_arg(format!(
                "raw input '{}' is too large for one BYTES element",
                input.name
            ))
        })?;
        let mut element = BytesMut::with_capacity(data.len() + 4);
        element.put_u32_le(length);
        element.put_slice(&data);
        element.freeze()
    } else {
        if let Some(axis) = variable_axis {
            let element_size = input.datatype.element_size().unwrap_or(1);
            // A zero-sized fixed dimension leaves no room for a variable one.
            let rows = data
                .len()
                .checked_div(fixed_elements.saturating_mul(element_size))
                .unwrap_or(0);
            shape[axis] = i64::try_from(rows).unwrap_or(i64::MAX);
        }
        data
    };
    Ok(InputTensor {
        name: input.name.clone(),
        datatype: input.datatype,
        shape,
        data,
        device: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::spec;

    fn model(batch: u32, inputs: &str) -> std::sync::Arc<ModelSpec> {
        spec(
            "m",
            &format!(
                r#"backend: "identity" max_batch_size: {batch}
                   input [ {inputs} ]
                   output [ {{ name: "O" data_type: TYPE_FP32 dims: [ 1 ] }} ]"#
            ),
        )
    }

    #[test]
    fn the_variable_dimension_takes_the_rest_of_the_bytes() {
        let m = model(8, r#"{ name: "I" data_type: TYPE_FP32 dims: [ 2, -1 ] }"#);
        let input = raw_input(&m, Bytes::from(vec![0u8; 48])).expect("deduced");
        assert_eq!((input.name.as_str(), input.shape), ("I", vec![1, 2, 6]));
        let fixed = model(0, r#"{ name: "I" data_type: TYPE_INT32 dims: [ 4 ] }"#);
        let input = raw_input(&fixed, Bytes::from(vec![0u8; 16])).expect("deduced");
        assert_eq!((input.datatype, input.shape), (DataType::Int32, vec![4]));
    }

    #[test]
    fn a_bytes_input_is_one_element_with_its_length_prefix() {
        let m = model(0, r#"{ name: "S" data_type: TYPE_STRING dims: [ 1 ] }"#);
        let input = raw_input(&m, Bytes::from_static(b"hey")).expect("deduced");
        assert_eq!(&input.data[..], b"\x03\0\0\0hey");
        let wide = model(0, r#"{ name: "S" data_type: TYPE_STRING dims: [ 2 ] }"#);
        let e = raw_input(&wide, Bytes::new()).expect_err("two elements");
        assert_eq!(
            e.message(),
            "[request id: <id_unknown>] For BYTE datatype raw input 'S', the model must have input shape [1]"
        );
    }

    #[test]
    fn triton_messages_when_the_input_can_not_be_deduced() {
        let two = model(
            0,
            r#"{ name: "A" data_type: TYPE_FP32 dims: [ 1 ] },
               { name: "B" data_type: TYPE_FP32 dims: [ 1 ] }"#,
        );
        let e = raw_input(&two, Bytes::new()).expect_err("two inputs");
        assert_eq!(
            e.message(),
            "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'm' model configuration"
        );
        let vague = model(0, r#"{ name: "I" data_type: TYPE_FP32 dims: [ -1, -1 ] }"#);
        let e = raw_input(&vague, Bytes::new()).expect_err("two variable dims");
        assert_eq!(
            e.message(),
            "[request id: <id_unknown>] The shape of the raw input 'I' can not be deduced because there are more than one variable-sized dimension"
        );
    }
}
