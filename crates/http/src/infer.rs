//! The infer endpoint's codec: JSON request (with the binary tensor data extension) →
//! core request, and core response → JSON or JSON + binary tail.

use std::collections::HashMap;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use nereid_core::model::{format_dims, ModelSpec};
use nereid_core::raw_input::raw_input;
use nereid_core::request::{
    element_count, Classifications, InferRequest, InferResponse, InputTensor, OutputTensor,
    ParamValue, Parameters,
};
use nereid_core::shm::{frontend_query, OutputTarget, ShmParams, ShmRegistry};
use nereid_core::{DataType, Error, Result};
use serde_json::{Map, Value};

use crate::compression::{self, Encoding};
use crate::json_data::{check_json_text, parse_data};
use crate::request_json::{InputData, InputJson, OutputJson};
use crate::request_scan;
use crate::response_json::{self, Placement};

/// A fixed-width input's JSON `data` must hold exactly as many elements as its `shape`
/// says, refused in Triton's words for too many and too few (BYTES is checked by size in
/// the core). Triton answers these 500; Nereid 400, as for every malformed input.
fn check_data_count(datatype: DataType, shape: &[i64], data_bytes: usize) -> Result<()> {
    let (Some(width), Some(expected)) = (datatype.element_size(), element_count(shape)) else {
        return Ok(());
    };
    let found = data_bytes / width.max(1);
    if found > expected {
        return Err(Error::invalid_arg(
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ));
    }
    if found < expected {
        return Err(Error::invalid_arg(
            "Failed to parse 'data' field: shape does not match true shape",
        ));
    }
    Ok(())
}

/// Header giving the length of the JSON part of a body with binary tensors.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

/// [`HEADER_LENGTH`] as a header name: looked up and set without parsing the name again
/// on every request.
const HEADER_LENGTH_NAME: HeaderName = HeaderName::from_static(HEADER_LENGTH);

/// How each output is to be returned.
#[derive(Debug, Default)]
pub struct OutputFormat {
    binary_by_default: bool,
    binary: HashMap<String, bool>,
    /// Outputs written into shared memory instead of the body.
    shm: HashMap<String, OutputTarget>,
}

impl OutputFormat {
    fn is_binary(&self, name: &str) -> bool {
        self.binary
            .get(name)
            .copied()
            .unwrap_or(self.binary_by_default)
    }
}

/// How an infer body is laid out, from its `Inference-Header-Content-Length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// JSON only (no header).
    Json,
    /// This many bytes of JSON, then binary tensor data.
    Split(usize),
    /// No JSON at all (header value 0): the body is the raw bytes of the model's single
    /// input (the binary tensor data extension's raw binary request).
    Raw,
}

/// Reads the body layout with Triton's messages for a malformed header.
pub fn layout(headers: &HeaderMap, body_len: usize) -> Result<Layout> {
    let Some(value) = headers.get(&HEADER_LENGTH_NAME) else {
        return Ok(Layout::Json);
    };
    let text = value.to_str().unwrap_or("").trim();
    let n: i64 = text.parse().map_err(|_| {
        Error::invalid_arg(format!(
            "Unable to parse Inference-Header-Content-Length, got: {text}"
        ))
    })?;
    if n < 0 || n as u64 > body_len as u64 {
        return Err(Error::invalid_arg(format!(
            "inference header size should be in range (0, {body_len}), got: {text}"
        )));
    }
    Ok(match n {
        0 => Layout::Raw,
        n => Layout::Split(n as usize),
    })
}

/// Triton's message for JSON longer than `--http-max-input-size`.
pub fn json_too_large(length: usize, max_input_size: usize) -> Error {
    Error::invalid_arg(format!(
        "request JSON size of {length} bytes exceeds the maximum allowed input size of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
    ))
}

/// Decodes a raw binary request ([`Layout::Raw`]) for model `spec`: its one input deduced
/// from the configuration, every output returned, in binary by default as Triton does.
pub fn decode_raw(
    spec: &ModelSpec,
    model_version: Option<i64>,
    body: Bytes,
    max_input_size: usize,
) -> Result<(InferRequest, OutputFormat)> {
    if body.len() > max_input_size {
        return Err(Error::invalid_arg(format!(
            "Raw input has a byte_size ({} bytes) that exceeds the maximum allowed value of {max_input_size} bytes. Use --http-max-input-size to increase the limit.",
            body.len()
        )));
    }
    let input = raw_input(spec, body)?;
    let request = InferRequest {
        model_name: spec.name.clone(),
        model_version,
        inputs: vec![input],
        ..InferRequest::default()
    };
    let format = OutputFormat {
        binary_by_default: true,
        ..OutputFormat::default()
    };
    Ok((request, format))
}

/// Decodes an infer body laid out as `layout` (not [`Layout::Raw`]) into a core request
/// and the output format; tensors in shared memory are resolved against `regions`.
pub fn decode(
    model_name: &str,
    model_version: Option<i64>,
    layout: Layout,
    body: Bytes,
    regions: &ShmRegistry,
    max_input_size: usize,
) -> Result<(InferRequest, OutputFormat)> {
    let (json, binary) = match layout {
        Layout::Split(n) => (body.slice(..n), body.slice(n..)),
        Layout::Json | Layout::Raw => (body, Bytes::new()),
    };
    if json.len() > max_input_size {
        return Err(json_too_large(json.len(), max_input_size));
    }
    let text = std::str::from_utf8(&json)
        .map_err(|e| Error::invalid_arg(format!("failed to parse the request JSON buffer: {e}")))?;
    let parsed = match request_scan::scan(text) {
        Some(parsed) => parsed,
        None => serde_json::from_str(text).map_err(|e| {
            Error::invalid_arg(format!("failed to parse the request JSON buffer: {e}"))
        })?,
    };
    let mut format = OutputFormat::default();
    let parameters = request_parameters(parsed.parameters, &mut format)?;
    let inputs = decode_inputs(model_name, parsed.inputs, binary, regions, max_input_size)?;
    let mut classification = Vec::new();
    let requested_outputs = parsed
        .outputs
        .map(|outputs| {
            outputs
                .into_iter()
                .map(|o| {
                    output_format(&o, regions, &mut format, &mut classification)?;
                    Ok(o.name)
                })
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?;
    Ok((
        InferRequest {
            model_name: model_name.to_string(),
            model_version,
            id: parsed.id.unwrap_or_default(),
            parameters,
            inputs,
            requested_outputs,
            classification,
            trace: None,
            output_query: Some(frontend_query(&format.shm)),
        },
        format,
    ))
}

/// Converts a JSON parameter value (scalars only).
fn param_value(key: &str, v: Value) -> Result<ParamValue> {
    match v {
        Value::Bool(b) => Ok(ParamValue::Bool(b)),
        Value::String(s) => Ok(ParamValue::String(s)),
        Value::Number(n) => Ok(if let Some(i) = n.as_i64() {
            ParamValue::Int(i)
        } else if let Some(u) = n.as_u64() {
            ParamValue::Uint(u)
        } else {
            ParamValue::Double(n.as_f64().unwrap_or(f64::NAN))
        }),
        _ => Err(Error::invalid_arg(format!(
            "parameter '{key}' must be a string, a number or a boolean"
        ))),
    }
}

fn expect_bool(key: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| {
        Error::invalid_arg(format!(
            "Unable to parse '{key}': attempt to access JSON non-boolean as boolean"
        ))
    })
}

fn request_parameters(
    json: Option<Map<String, Value>>,
    format: &mut OutputFormat,
) -> Result<Parameters> {
    let mut out = Vec::new();
    for (key, value) in json.unwrap_or_default() {
        match key.as_str() {
            "binary_data_output" => format.binary_by_default = expect_bool(&key, &value)?,
            "sequence_start" | "sequence_end" => {
                expect_bool(&key, &value)?;
                out.push((key.clone(), param_value(&key, value)?));
            }
            "sequence_id" => {
                if !(value.is_string() || value.is_u64()) {
                    return Err(Error::invalid_arg(
                        "Unable to parse 'sequence_id': expected an unsigned integer or a string",
                    ));
                }
                out.push((key.clone(), param_value(&key, value)?));
            }
            "priority" | "timeout" => {
                if !value.is_u64() {
                    return Err(Error::invalid_arg(format!(
                        "Unable to parse '{key}': expected an unsigned integer"
                    )));
                }
                out.push((key.clone(), param_value(&key, value)?));
            }
            k if k.starts_with("triton_") => {
                return Err(Error::invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
                ));
            }
            _ => out.push((key.clone(), param_value(&key, value)?)),
        }
    }
    Ok(out)
}

/// The shared-memory parameters of a tensor's JSON `parameters`.
fn shm_params(tensor: &str, params: &Map<String, Value>) -> Result<ShmParams> {
    let number = |key: &str| {
        params
            .get(key)
            .map(|v| {
                v.as_u64().ok_or_else(|| {
                    Error::invalid_arg(format!(
                        "Unable to parse '{key}' of tensor '{tensor}': expected an unsigned integer"
                    ))
                })
            })
            .transpose()
    };
    let region = params
        .get("shared_memory_region")
        .map(|v| {
            v.as_str().map(str::to_owned).ok_or_else(|| {
                Error::invalid_arg(format!(
                    "Unable to parse 'shared_memory_region' of tensor '{tensor}': expected a string"
                ))
            })
        })
        .transpose()?;
    Ok(ShmParams {
        region,
        offset: number("shared_memory_offset")?,
        byte_size: number("shared_memory_byte_size")?,
    })
}

fn decode_inputs(
    model_name: &str,
    inputs: Vec<InputJson<'_>>,
    binary: Bytes,
    regions: &ShmRegistry,
    max_input_size: usize,
) -> Result<Vec<InputTensor>> {
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        // Triton reads each dimension as an unsigned integer; Nereid keeps its words but
        // answers 400 (Triton's 500 blames the server for a client's request).
        if input.shape.iter().any(|&d| d < 0) {
            return Err(Error::invalid_arg(
                "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
            ));
        }
        let datatype = DataType::parse(&input.datatype).ok_or_else(|| {
            Error::invalid_arg(format!(
                "invalid datatype '{}' for input '{}'",
                input.datatype, input.name
            ))
        })?;
        let params = input.parameters.unwrap_or_default();
        let binary_size = params
            .get("binary_data_size")
            .map(|v| {
                v.as_u64().ok_or_else(|| {
                    Error::invalid_arg(format!(
                        "Unable to parse 'binary_data_size' of input '{}': expected an unsigned integer",
                        input.name
                    ))
                })
            })
            .transpose()?;
        let shm_params = shm_params(&input.name, &params)?;
        let region_set = shm_params.region.is_some();
        let shm = if input.data.is_none() && binary_size.is_none() {
            shm_params.resolve(&input.name)?
        } else {
            None
        };
        let fields = [
            (input.data.is_some(), "'data'"),
            (binary_size.is_some(), "'binary_data_size'"),
            (region_set, "'shared_memory_region'"),
        ];
        if fields.iter().filter(|(on, _)| *on).count() != 1 {
            let set: Vec<&str> = fields
                .into_iter()
                .filter_map(|(on, name)| on.then_some(name))
                .collect();
            let detail = if set.is_empty() {
                "But no field is set".to_string()
            } else {
                format!("But set {}", set.join(" "))
            };
            return Err(Error::invalid_arg(format!(
                "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. {detail}"
            )));
        }
        let mut device = None;
        let data = if let Some(data) = input.data {
            check_json_input_size(&input.name, datatype, &input.shape, max_input_size)?;
            let bytes = match data {
                InputData::Read(bytes) => bytes,
                InputData::Text(raw) => parse_data(datatype, raw.get()).map_err(|e| {
                    e.into_error(datatype, &format!("'data' of input '{}'", input.name))
                })?,
            };
            check_data_count(datatype, &input.shape, bytes.len())?;
            Bytes::from(bytes)
        } else if let Some(size) = binary_size {
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            let available = binary.len() - offset;
            if size > available {
                return Err(Error::invalid_arg(format!(
                    "unexpected size for input '{}', expecting {} additional bytes for model '{model_name}'",
                    input.name,
                    size - available
                )));
            }
            let part = binary.slice(offset..offset + size);
            offset += size;
            part
        } else if let Some(shm) = shm {
            let (data, on_gpu) = regions.input_data(&shm)?;
            device = on_gpu;
            data
        } else {
            return Err(Error::internal(
                "an input without data passed the 'only one of' check",
            ));
        };
        for key in params.keys() {
            if key.starts_with("triton_") {
                return Err(Error::invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
                ));
            }
        }
        out.push(InputTensor {
            name: input.name,
            datatype,
            shape: input.shape,
            data,
            device,
        });
    }
    if offset != binary.len() {
        return Err(Error::invalid_arg(format!(
            "unexpected additional input data for model '{model_name}'"
        )));
    }
    Ok(out)
}

/// Triton's checks of a JSON input's declared size before its data is read, in its order
/// and words: the element count must fit an `i64`, so must the byte size, and the byte
/// size must fit `--http-max-input-size`. BYTES sizes are bounded by the JSON.
fn check_json_input_size(
    name: &str,
    datatype: DataType,
    shape: &[i64],
    max_input_size: usize,
) -> Result<()> {
    // A zero dimension makes the count 0 whatever follows (Triton stops there too).
    let elements = if shape.contains(&0) {
        Some(0)
    } else {
        shape.iter().try_fold(1i64, |n, &d| n.checked_mul(d))
    };
    let Some(elements) = elements else {
        return Err(Error::invalid_arg(format!(
            "invalid shape for input '{name}': shape {} causes total element count to exceed maximum size of {}",
            format_dims(shape),
            i64::MAX
        )));
    };
    let Some(element_size) = datatype.element_size() else {
        return Ok(());
    };
    let width = i64::try_from(element_size).unwrap_or(i64::MAX);
    let Some(byte_size) = elements.checked_mul(width) else {
        return Err(Error::invalid_arg(format!(
            "byte size overflow for input '{name}': element count ({elements}) * data type size ({element_size}) exceeds maximum allowed size ({})",
            i64::MAX
        )));
    };
    if usize::try_from(byte_size).map_or(true, |size| size > max_input_size) {
        return Err(Error::invalid_arg(format!(
            "JSON input '{name}' has a byte_size ({byte_size} bytes) that exceeds the maximum allowed value of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
        )));
    }
    Ok(())
}

/// Records how a requested output is returned: binary, JSON or into shared memory, and
/// whether as its top classes (`classification`, into `classification`). The checks come in
/// Triton's order: `classification` with shared memory, the count, then shared memory.
fn output_format(
    output: &OutputJson,
    regions: &ShmRegistry,
    format: &mut OutputFormat,
    classification: &mut Classifications,
) -> Result<()> {
    let Some(params) = &output.parameters else {
        return Ok(());
    };
    if params.contains_key("shared_memory_region") && params.contains_key("classification") {
        return Err(Error::invalid_arg(
            "Output can't set both 'shared_memory_region' and 'classification'",
        ));
    }
    if let Some(count) = params.get("classification") {
        let count = count.as_u64().ok_or_else(|| {
            Error::invalid_arg(
                "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer",
            )
        })?;
        // Triton keeps the count in 32 bits, and 0 means "not a classification".
        let count = count as u32;
        if count > 0 {
            classification.push((output.name.clone(), count));
        }
    }
    if let Some(shm) = shm_params(&output.name, params)?.resolve(&output.name)? {
        // tritonclient sends `binary_data: false` with shared memory; only `true` conflicts.
        if params.get("binary_data").and_then(Value::as_bool) == Some(true) {
            return Err(Error::invalid_arg(
                "Output can't set both 'shared_memory_region' and 'binary_data'",
            ));
        }
        format
            .shm
            .insert(output.name.clone(), regions.output(&shm)?);
        return Ok(());
    }
    if let Some(v) = params.get("binary_data") {
        format
            .binary
            .insert(output.name.clone(), expect_bool("binary_data", v)?);
    }
    Ok(())
}

/// Encodes a response, with outputs written into their shared-memory regions, binary
/// outputs appended after the JSON when asked for, and compressed when the client accepts
/// it.
pub fn encode(
    response: &InferResponse,
    format: &OutputFormat,
    accept: Option<Encoding>,
) -> Result<Response> {
    for o in &response.outputs {
        if let Some(target) = format.shm.get(&o.name) {
            target.write(o)?;
        }
    }
    let placement = |o: &OutputTensor| {
        if format.shm.contains_key(&o.name) {
            Placement::SharedMemory
        } else if format.is_binary(&o.name) {
            Placement::Binary
        } else {
            Placement::Json
        }
    };
    for o in &response.outputs {
        if placement(o) == Placement::Json {
            check_json_text(&o.name, o.datatype, &o.data).map_err(Error::invalid_arg)?;
        }
    }
    let binary = || {
        response
            .outputs
            .iter()
            .filter(|o| placement(o) == Placement::Binary)
    };
    let binary_size: usize = binary().map(|o| o.data.len()).sum();
    let has_binary = binary().next().is_some();
    // Sized for the usual answer at once: names, shapes and a few dozen numbers per
    // output, then the binary outputs.
    let estimate = 128 + response.outputs.len() * 256 + binary_size;
    let mut body = Vec::with_capacity(estimate);
    if let Err(e) = response_json::write(&mut body, response, placement) {
        return Err(Error::internal(format!(
            "failed to serialize the response: {e}"
        )));
    }
    // The headers go straight into the response's own map: a map of their own, merged
    // in by `into_response`, would be allocated twice per request.
    let json_length = body.len();
    let content_type = if has_binary {
        for o in binary() {
            body.extend_from_slice(&o.data);
        }
        "application/octet-stream"
    } else {
        "application/json"
    };
    if let Some(encoding) = accept {
        body = compression::encode(encoding, &body);
    }
    let mut response = Response::new(axum::body::Body::from(body));
    let headers = response.headers_mut();
    if has_binary {
        headers.insert(HEADER_LENGTH_NAME, HeaderValue::from(json_length));
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(encoding) = accept {
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(encoding.token()),
        );
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_plain(
        model: &str,
        version: Option<i64>,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<(InferRequest, OutputFormat)> {
        let layout = layout(headers, body.len())?;
        decode(
            model,
            version,
            layout,
            body,
            &ShmRegistry::default(),
            1 << 20,
        )
    }

    fn headers_with_length(n: usize) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HEADER_LENGTH, HeaderValue::from(n));
        h
    }

    #[test]
    fn splits_json_and_binary_inputs() {
        let json = br#"{"inputs":[{"name":"A","shape":[1,2],"datatype":"INT32","parameters":{"binary_data_size":8}},{"name":"B","shape":[1],"datatype":"INT32","data":[7]}],"outputs":[{"name":"O","parameters":{"binary_data":true}}]}"#;
        let mut body = json.to_vec();
        body.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        let (req, format) = decode_plain(
            "m",
            None,
            &headers_with_length(json.len()),
            Bytes::from(body),
        )
        .expect("valid");
        assert_eq!(&req.inputs[0].data[..], &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(&req.inputs[1].data[..], &7i32.to_le_bytes());
        assert!(format.is_binary("O"));
        assert!(!format.is_binary("P"));
    }

    #[test]
    fn triton_messages_for_malformed_bodies() {
        let json = br#"{"inputs":[{"name":"A","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}]}"#;
        let err = decode_plain("m", None, &HeaderMap::new(), Bytes::from_static(json)).unwrap_err();
        assert_eq!(
            err.message(),
            "unexpected size for input 'A', expecting 8 additional bytes for model 'm'"
        );
        let mut body = json.to_vec();
        body.extend_from_slice(&[0; 4]);
        let err = decode_plain(
            "m",
            None,
            &headers_with_length(json.len()),
            Bytes::from(body.clone()),
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "unexpected size for input 'A', expecting 4 additional bytes for model 'm'"
        );
        body.extend_from_slice(&[0; 5]);
        let err = decode_plain(
            "m",
            None,
            &headers_with_length(json.len()),
            Bytes::from(body),
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "unexpected additional input data for model 'm'"
        );
        let both = br#"{"inputs":[{"name":"A","shape":[1],"datatype":"INT32","data":[1],"parameters":{"shared_memory_region":"r"}}]}"#;
        let err = decode_plain("m", None, &HeaderMap::new(), Bytes::from_static(both)).unwrap_err();
        assert!(
            err.message()
                .ends_with("But set 'data' 'shared_memory_region'"),
            "{}",
            err.message()
        );
        let reserved = br#"{"parameters":{"triton_x":1},"inputs":[]}"#;
        let err =
            decode_plain("m", None, &HeaderMap::new(), Bytes::from_static(reserved)).unwrap_err();
        assert!(err.message().contains("reserved for Triton"));
    }

    fn outputs(json: &str) -> Result<(InferRequest, OutputFormat)> {
        let body = format!(r#"{{"inputs":[],"outputs":{json}}}"#);
        decode_plain("m", None, &HeaderMap::new(), Bytes::from(body))
    }

    #[test]
    fn classification_is_parsed_as_triton_does() {
        let (req, format) = outputs(
            r#"[{"name":"A","parameters":{"classification":3,"binary_data":true}},{"name":"B"}]"#,
        )
        .expect("valid");
        assert_eq!(req.classification, vec![("A".to_string(), 3)]);
        assert_eq!(req.requested_outputs, Some(vec!["A".into(), "B".into()]));
        assert!(format.is_binary("A"));
        // 0, and a count that is 0 in Triton's 32 bits, return the plain output.
        for zero in ["0", "4294967296"] {
            let json = format!(r#"[{{"name":"A","parameters":{{"classification":{zero}}}}}]"#);
            let (req, _) = outputs(&json).expect("valid");
            assert!(req.classification.is_empty(), "{zero}");
        }
        for bad in ["-1", "1.5", "\"2\"", "true"] {
            let json = format!(r#"[{{"name":"A","parameters":{{"classification":{bad}}}}}]"#);
            let e = outputs(&json).expect_err(bad);
            assert_eq!(
                e.message(),
                "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"
            );
        }
    }

    /// The body `encode` answers for `response` with outputs `binary` returned in binary.
    fn encoded(response: &InferResponse, binary: &[&str]) -> Vec<u8> {
        let format = OutputFormat {
            binary: binary.iter().map(|n| (n.to_string(), true)).collect(),
            ..OutputFormat::default()
        };
        let answer = encode(response, &format, None).expect("encodable");
        let body = answer.into_body();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime
            .block_on(axum::body::to_bytes(body, usize::MAX))
            .expect("body")
            .to_vec()
    }

    fn output(name: &str, datatype: DataType, shape: Vec<i64>, data: &[u8]) -> OutputTensor {
        OutputTensor {
            name: name.into(),
            datatype,
            shape,
            data: Bytes::copy_from_slice(data),
            device: None,
        }
    }

    #[test]
    fn responses_are_written_in_tritons_field_order_and_serde_jsons_spelling() {
        let floats: Vec<u8> = [1.5f32, -0.0, f32::NAN, 3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut response = InferResponse {
            model_name: "m\"x".into(),
            model_version: 12,
            id: String::new(),
            parameters: vec![],
            outputs: vec![output("OUT", DataType::Fp32, vec![2, 2], &floats)].into(),
        };
        assert_eq!(
            String::from_utf8(encoded(&response, &[])).expect("text"),
            r#"{"model_name":"m\"x","model_version":"12","outputs":[{"name":"OUT","datatype":"FP32","shape":[2,2],"data":[1.5,-0.0,null,3.0]}]}"#
        );
        response.id = "r\n1".into();
        response.parameters = vec![
            ("b".into(), ParamValue::Bool(true)),
            ("i".into(), ParamValue::Int(-3)),
            ("u".into(), ParamValue::Uint(u64::MAX)),
            ("d".into(), ParamValue::Double(0.25)),
            ("s".into(), ParamValue::String("é\t".into())),
        ];
        response
            .outputs
            .push(output("RAW", DataType::Uint8, vec![3], &[1, 2, 3]));
        response
            .outputs
            .push(output("T", DataType::Bytes, vec![1], b"\x02\x00\x00\x00hi"));
        let body = encoded(&response, &["RAW"]);
        let json = r#"{"id":"r\n1","model_name":"m\"x","model_version":"12","parameters":{"b":true,"i":-3,"u":18446744073709551615,"d":0.25,"s":"é\t"},"outputs":[{"name":"OUT","datatype":"FP32","shape":[2,2],"data":[1.5,-0.0,null,3.0]},{"name":"RAW","datatype":"UINT8","shape":[3],"parameters":{"binary_data_size":3}},{"name":"T","datatype":"BYTES","shape":[1],"data":["hi"]}]}"#;
        let mut expected = json.as_bytes().to_vec();
        expected.extend_from_slice(&[1, 2, 3]);
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&expected)
        );
    }

    #[test]
    fn classification_and_shared_memory_conflict() {
        // Any value, even an invalid one, with any region (looked up only later).
        for value in ["2", "0", "\"x\""] {
            let json = format!(
                r#"[{{"name":"A","parameters":{{"classification":{value},"shared_memory_region":"r","shared_memory_byte_size":8}}}}]"#
            );
            let e = outputs(&json).expect_err(value);
            assert_eq!(e.kind(), nereid_core::ErrorKind::InvalidArg);
            assert_eq!(
                e.message(),
                "Output can't set both 'shared_memory_region' and 'classification'"
            );
        }
    }
}
