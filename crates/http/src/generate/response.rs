//! A core response → the generate extension's JSON object: `id` (when the request had
//! one), `model_name`, `model_version`, each response parameter and each output by name,
//! keys in byte order and the first of two equal names kept, as Triton builds it from an
//! ordered map. An output of one element is that element, others a flat array.

use std::collections::BTreeMap;

use nereid_core::request::{element_count, InferResponse, ParamValue};
use nereid_core::{Error, Result};
use serde_json::value::RawValue;

use crate::json_data::{check_json_text, JsonData};

/// The response object's JSON text.
pub fn encode(response: &InferResponse) -> Result<String> {
    let mut fields: BTreeMap<&str, Box<RawValue>> = BTreeMap::new();
    if !response.id.is_empty() {
        fields.insert("id", json(&response.id)?);
    }
    fields.insert("model_name", json(&response.model_name)?);
    fields
        .entry("model_version")
        .or_insert(json(&response.model_version.to_string())?);
    for (name, value) in &response.parameters {
        if !fields.contains_key(name.as_str()) {
            fields.insert(name, parameter(value)?);
        }
    }
    for output in &response.outputs {
        if fields.contains_key(output.name.as_str()) {
            continue;
        }
        check_json_text(&output.name, output.datatype, &output.data).map_err(Error::invalid_arg)?;
        let text = serde_json::to_string(&JsonData {
            datatype: output.datatype,
            data: &output.data,
        })
        .map_err(serialize_error)?;
        let text = if element_count(&output.shape) == Some(1) {
            // `[x]` → `x`: a single element stands alone.
            text.get(1..text.len().saturating_sub(1))
                .unwrap_or_default()
                .to_string()
        } else {
            text
        };
        fields.insert(
            &output.name,
            RawValue::from_string(text).map_err(serialize_error)?,
        );
    }
    serde_json::to_string(&fields).map_err(serialize_error)
}

fn parameter(value: &ParamValue) -> Result<Box<RawValue>> {
    match value {
        ParamValue::Bool(b) => json(b),
        ParamValue::Int(i) => json(i),
        ParamValue::Uint(u) => json(u),
        ParamValue::Double(d) => json(d),
        ParamValue::String(s) => json(s),
    }
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<Box<RawValue>> {
    serde_json::value::to_raw_value(value).map_err(serialize_error)
}

fn serialize_error(e: serde_json::Error) -> Error {
    Error::internal(format!("failed to serialize the response: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use nereid_core::request::OutputTensor;
    use nereid_core::DataType;

    fn output(name: &str, datatype: DataType, shape: &[i64], data: &[u8]) -> OutputTensor {
        OutputTensor {
            name: name.into(),
            datatype,
            shape: shape.to_vec(),
            data: Bytes::copy_from_slice(data),
            device: None,
        }
    }

    #[test]
    fn fields_in_byte_order_with_single_elements_unwrapped() {
        let response = InferResponse {
            model_name: "m".into(),
            model_version: 3,
            id: "42".into(),
            parameters: vec![("count".into(), ParamValue::Int(2))],
            outputs: vec![
                output("text_output", DataType::Bytes, &[1, 1], b"\x02\0\0\0ok"),
                output("OUT", DataType::Int32, &[2], &[1, 0, 0, 0, 2, 0, 0, 0]),
                output("model_name", DataType::Int32, &[1], &[9, 0, 0, 0]),
            ]
            .into(),
        };
        assert_eq!(
            encode(&response).expect("encodes"),
            r#"{"OUT":[1,2],"count":2,"id":"42","model_name":"m","model_version":"3","text_output":"ok"}"#
        );
    }
}
