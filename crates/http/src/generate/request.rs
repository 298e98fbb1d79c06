//! A generate request body → a core request, by Triton's mapping: each field of the JSON
//! object named like a model input becomes that input (a scalar or an array, shaped to
//! the input's dims), any other field becomes a request parameter, and the fields of a
//! `parameters` object are mapped the same way.

use bytes::Bytes;
use nereid_core::model::{ModelSpec, TensorSpec};
use nereid_core::request::{InferRequest, InputTensor, ParamValue};
use nereid_core::validate::request_prefix;
use nereid_core::{Error, Result};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::infer::json_too_large;
use crate::json_data::parse_data;

/// The one field with a nested mapping in Triton's generate request schema.
const PARAMETERS: &str = "parameters";

/// Decodes a generate body for the model `spec` (version `model_version` as asked).
pub fn decode(
    spec: &ModelSpec,
    model_version: Option<i64>,
    body: &[u8],
    max_input_size: usize,
) -> Result<InferRequest> {
    if body.len() > max_input_size {
        return Err(json_too_large(body.len(), max_input_size));
    }
    // Triton answers a body it cannot parse with 500, as every TritonJson error.
    let parse_error = |e: &dyn std::fmt::Display| {
        Error::internal(format!("failed to parse the request JSON buffer: {e}"))
    };
    let text = std::str::from_utf8(body).map_err(|e| parse_error(&e))?;
    let document: &RawValue = serde_json::from_str(text).map_err(|e| parse_error(&e))?;
    let members = members(document)
        .ok_or_else(|| Error::internal("attempt to get members for non-object"))?;
    let mut request = InferRequest {
        model_name: spec.name.clone(),
        model_version,
        ..InferRequest::default()
    };
    if let Some((_, id)) = members.iter().find(|(k, _)| k == "id") {
        request.id = serde_json::from_str::<String>(id.get()).map_err(|_| {
            Error::internal("Unable to parse 'id': attempt to access JSON non-string as string")
        })?;
    }
    let mut mapper = Mapper {
        spec,
        max_input_size,
        request: &mut request,
    };
    mapper.map_object(&members, true)?;
    Ok(request)
}

/// The members of a JSON object in document order, or `None` when `value` is not an
/// object. Values stay unparsed text, so deep data is never walked recursively here.
fn members(value: &RawValue) -> Option<Vec<(String, &RawValue)>> {
    struct Members;
    impl<'de> Visitor<'de> for Members {
        type Value = Vec<(String, &'de RawValue)>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                out.push(entry);
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(value.get());
    de.deserialize_map(Members).ok()
}

struct Mapper<'a> {
    spec: &'a ModelSpec,
    max_input_size: usize,
    request: &'a mut InferRequest,
}

impl Mapper<'_> {
    /// Maps the fields of one object; `top` is the request itself, where `parameters`
    /// nests. Triton counts the input bytes against the limit per object.
    fn map_object(&mut self, members: &[(String, &RawValue)], top: bool) -> Result<()> {
        let mut consumed = 0usize;
        for (name, value) in members {
            if top && name == PARAMETERS {
                self.map_parameters(value)?;
                continue;
            }
            match self.spec.input(name) {
                Some(input) => {
                    // Triton refuses the second one as it is added, with the id prefix.
                    if self.request.inputs.iter().any(|i| &i.name == name) {
                        return Err(Error::invalid_arg(format!(
                            "{}input '{name}' already exists in request",
                            request_prefix(&self.request.id)
                        )));
                    }
                    let tensor = self.tensor(input, value, &mut consumed)?;
                    self.request.inputs.push(tensor);
                }
                None => {
                    let value = parameter(name, value)?;
                    self.request.parameters.push((name.clone(), value));
                }
            }
        }
        Ok(())
    }

    fn map_parameters(&mut self, value: &RawValue) -> Result<()> {
        if self.spec.input(PARAMETERS).is_some() {
            return Err(Error::invalid_arg(
                "Keyword 'parameters' for nested schema also given as input tensor name",
            ));
        }
        let members = members(value).ok_or_else(|| {
            Error::internal(
                "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
            )
        })?;
        self.map_object(&members, false)
            .map_err(|e| e.prefixed("Converting keyword: 'parameters': "))
    }

    /// A field's value as the tensor of `input`: its top-level elements spread over the
    /// input's dims, fixed ones first, the innermost variable one taking the rest and any
    /// other variable one 1.
    fn tensor(
        &self,
        input: &TensorSpec,
        value: &RawValue,
        consumed: &mut usize,
    ) -> Result<InputTensor> {
        let name = &input.name;
        let datatype = input.datatype;
        let text = value.get();
        let elements = if text.starts_with('[') {
            serde_json::from_str::<Vec<&RawValue>>(text)
                .map_err(|e| Error::invalid_arg(format!("Unable to parse 'data': {e}")))?
                .len()
        } else {
            1
        };
        // BYTES are sized by reading them (the JSON bounds that); other types by count.
        let (byte_size, bytes_data) = match datatype.element_size() {
            None => {
                let data = parse_data(datatype, text)
                    .map_err(|e| e.into_error(datatype, "JSON bytes array"))?;
                (data.len(), Some(data))
            }
            Some(size) => (elements.saturating_mul(size), None),
        };
        if byte_size == 0 {
            return Ok(InputTensor {
                name: name.clone(),
                datatype,
                shape: Vec::new(),
                data: Bytes::new(),
                device: None,
            });
        }
        if byte_size.saturating_add(*consumed) > self.max_input_size {
            return Err(Error::invalid_arg(format!(
                "request size of {consumed} bytes with input '{name}' of size {byte_size} bytes exceeds the maximum allowed input size of {}. Use --http-max-input-size to increase the limit.",
                self.max_input_size
            )));
        }
        *consumed += byte_size;
        let shape = spread(&self.spec.client_dims(&input.dims), elements).ok_or_else(|| {
            Error::invalid_arg(format!(
                "The schema can not convert input '{name}' to tensor with proper shape"
            ))
        })?;
        let data = match bytes_data {
            Some(data) => data,
            None => {
                let data =
                    parse_data(datatype, text).map_err(|e| e.into_error(datatype, "'data'"))?;
                if data.len() != byte_size {
                    return Err(Error::internal(if data.len() > byte_size {
                        "Unable to parse 'data': Shape does not match true shape of 'data' field"
                    } else {
                        "Failed to parse 'data' field: shape does not match true shape"
                    }));
                }
                data
            }
        };
        Ok(InputTensor {
            name: name.clone(),
            datatype,
            shape,
            data: Bytes::from(data),
            device: None,
        })
    }
}

/// Triton's two passes that shape `elements` values to `dims` (-1 variable): every fixed
/// dimension, innermost first, must divide what is left; then the innermost variable
/// dimension takes the rest and the others are 1. `None` when nothing fits.
fn spread(dims: &[i64], elements: usize) -> Option<Vec<i64>> {
    let mut left = elements;
    for &d in dims.iter().rev().filter(|&&d| d != -1) {
        let d = usize::try_from(d).ok().filter(|&d| d > 0)?;
        if !left.is_multiple_of(d) {
            return None;
        }
        left /= d;
    }
    let mut shape = dims.to_vec();
    for d in shape.iter_mut().rev().filter(|d| **d == -1) {
        *d = i64::try_from(left).ok()?;
        left = 1;
    }
    (left == 1).then_some(shape)
}

/// A field that names no input, as a request parameter: a string, a boolean, an integer
/// that fits 64 bits, or else a number as a double.
fn parameter(name: &str, value: &RawValue) -> Result<ParamValue> {
    let invalid = || {
        Error::invalid_arg(format!(
            "parameter '{name}' has invalid type. It should be either 'int', 'bool', or 'string'."
        ))
    };
    // Arrays, objects and null are refused before anything is parsed.
    if value.get().starts_with(['[', '{', 'n']) {
        return Err(invalid());
    }
    match serde_json::from_str::<Value>(value.get()).map_err(|_| invalid())? {
        Value::String(s) => Ok(ParamValue::String(s)),
        Value::Bool(b) => Ok(ParamValue::Bool(b)),
        Value::Number(n) => Ok(match n.as_i64() {
            Some(i) => ParamValue::Int(i),
            None => ParamValue::Double(n.as_f64().unwrap_or(f64::NAN)),
        }),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::testing::spec;

    fn model() -> std::sync::Arc<ModelSpec> {
        spec(
            "m",
            r#"backend: "identity" max_batch_size: 4
               input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
                       { name: "V" data_type: TYPE_INT32 dims: [ 2, -1 ] },
                       { name: "S" data_type: TYPE_FP32 dims: [ 1 ] } ]
               output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]"#,
        )
    }

    fn decode_text(body: &str) -> Result<InferRequest> {
        decode(&model(), None, body.as_bytes(), 1 << 20)
    }

    #[test]
    fn fields_become_inputs_and_parameters() {
        let r = decode_text(
            r#"{"id":"42","text_input":"hi","V":[1,2,3,4],"parameters":{"S":0.5,"temperature":0,"stream":false,"big":18446744073709551615}}"#,
        )
        .expect("valid");
        assert_eq!(r.id, "42");
        let shapes: Vec<_> = r
            .inputs
            .iter()
            .map(|i| (i.name.as_str(), i.shape.clone()))
            .collect();
        assert_eq!(
            shapes,
            vec![
                ("text_input", vec![1, 1]),
                ("V", vec![1, 2, 2]),
                ("S", vec![1, 1])
            ]
        );
        assert_eq!(&r.inputs[0].data[..], b"\x02\0\0\0hi");
        assert_eq!(
            r.parameters,
            vec![
                ("id".to_string(), ParamValue::String("42".into())),
                ("temperature".to_string(), ParamValue::Int(0)),
                ("stream".to_string(), ParamValue::Bool(false)),
                (
                    "big".to_string(),
                    ParamValue::Double(18446744073709551615.0)
                ),
            ]
        );
    }

    #[test]
    fn the_two_passes_shape_like_triton() {
        assert_eq!(spread(&[-1, 2, -1], 6), Some(vec![1, 2, 3]));
        assert_eq!(spread(&[-1, 1], 1), Some(vec![1, 1]));
        assert_eq!(spread(&[2, 2], 4), Some(vec![2, 2]));
        assert_eq!(spread(&[2, 2], 3), None);
        assert_eq!(spread(&[4], 2), None);
        assert_eq!(spread(&[0, -1], 2), None);
    }

    #[test]
    fn triton_messages_for_bad_fields() {
        let message = |body: &str| decode_text(body).expect_err(body).message().to_string();
        assert_eq!(
            message(r#"{"V":[1,2,3]}"#),
            "The schema can not convert input 'V' to tensor with proper shape"
        );
        assert_eq!(
            message(r#"{"x":[1]}"#),
            "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."
        );
        assert_eq!(
            message(r#"{"parameters":{"x":null}}"#),
            "Converting keyword: 'parameters': parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."
        );
        assert_eq!(
            message(r#"{"parameters":1}"#),
            "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"
        );
        assert_eq!(message("[1]"), "attempt to get members for non-object");
        assert_eq!(
            message(r#"{"id":"7","S":1,"parameters":{"S":2}}"#),
            "Converting keyword: 'parameters': [request id: 7] input 'S' already exists in request"
        );
        let e = decode_text("").expect_err("empty");
        assert_eq!(e.kind(), nereid_core::ErrorKind::Internal);
        assert_eq!(
            message(r#"{"id":1}"#),
            "Unable to parse 'id': attempt to access JSON non-string as string"
        );
        let e = decode(&model(), None, br#"{"V":[1,2,3,4,5,6,7,8]}"#, 16).expect_err("limit");
        assert_eq!(
            e.message(),
            "request JSON size of 23 bytes exceeds the maximum allowed input size of 16 bytes. Use --http-max-input-size to increase the limit."
        );
        let e = decode(&model(), None, br#"{"V":[1,2,3,4,5,6]}"#, 20).expect_err("limit");
        assert_eq!(
            e.message(),
            "request size of 0 bytes with input 'V' of size 24 bytes exceeds the maximum allowed input size of 20. Use --http-max-input-size to increase the limit."
        );
        let deep = format!(
            "{{\"text_input\":{}\"a\"{}}}",
            "[".repeat(120),
            "]".repeat(120)
        );
        assert_eq!(
            message(&deep),
            "JSON nesting depth exceeds maximum allowed limit (100)"
        );
    }
}
