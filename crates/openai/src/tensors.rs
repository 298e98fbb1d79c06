//! The tensors of the LLM conventions: a generation becomes an ordinary inference request
//! (only the inputs the model declares, each in its declared type and shape), and each
//! response's outputs become a [`Piece`] of text with its token counts.

use bytes::Bytes;
use nereid_core::model::{ModelSpec, TensorSpec};
use nereid_core::request::{join_bytes_elements, split_bytes_elements, InferRequest, InputTensor};
use nereid_core::request::{InferResponse, OutputTensor};
use nereid_core::DataType;
use serde_json::{Map, Value};

use crate::catalog::Convention;
use crate::error::{ApiError, ApiResult};

/// One generation a route asks of a model.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    /// The prompt text (a chat's rendered template).
    pub prompt: String,
    /// One response per token or piece instead of one at the end.
    pub stream: bool,
    /// Output tokens at most.
    pub max_tokens: u32,
    /// vLLM's sampling fields (`temperature`, `top_p`, `stop`, `seed`, ...), already in
    /// vLLM's names; the TensorRT-LLM convention reads the ones it has tensors for.
    pub sampling: Map<String, Value>,
    /// Log probabilities asked for (vLLM's `logprobs` count).
    pub logprobs: Option<u32>,
    /// A JSON schema the output must follow (guided decoding), or `{}` for any JSON object.
    pub json_schema: Option<Value>,
}

/// What one response of the model says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Piece {
    /// The text (for a streamed vLLM response, the new text only).
    pub text: String,
    /// Prompt tokens, when the model reports them.
    pub input_tokens: Option<u64>,
    /// Output tokens in this response, when the model reports them.
    pub output_tokens: Option<u64>,
    /// `stop` or `length`, when the model reports it.
    pub finish_reason: Option<String>,
}

/// The inference request for `generation` to the model of `spec`.
pub fn request(
    spec: &ModelSpec,
    convention: Convention,
    generation: &Generation,
) -> ApiResult<InferRequest> {
    let mut inputs = Vec::new();
    let mut put = |name: &str, value: Value| -> ApiResult<()> {
        if let Some(tensor) = spec.inputs.iter().find(|t| t.name == name) {
            inputs.push(tensor_of(spec, tensor, &value)?);
        }
        Ok(())
    };
    put("text_input", Value::String(generation.prompt.clone()))?;
    put("stream", Value::Bool(generation.stream))?;
    // `echo` is done by the frontend for every model alike.
    put("exclude_input_in_output", Value::Bool(true))?;
    put("return_num_input_tokens", Value::Bool(true))?;
    put("return_num_output_tokens", Value::Bool(true))?;
    put("return_finish_reason", Value::Bool(true))?;
    put(
        "return_logprobs",
        Value::Bool(generation.logprobs.is_some()),
    )?;
    match convention {
        Convention::Vllm => {
            let mut sampling = generation.sampling.clone();
            sampling.insert("max_tokens".into(), generation.max_tokens.into());
            if let Some(n) = generation.logprobs {
                sampling.insert("logprobs".into(), n.into());
            }
            if let Some(schema) = &generation.json_schema {
                // vLLM's StructuredOutputsParams, as Triton's frontend passes them.
                let outputs = if schema.as_object().is_some_and(Map::is_empty) {
                    serde_json::json!({ "json_object": true })
                } else {
                    serde_json::json!({ "json": schema })
                };
                sampling.insert("structured_outputs".into(), outputs.to_string().into());
            }
            put(
                "sampling_parameters",
                Value::String(Value::Object(sampling).to_string()),
            )?;
        }
        Convention::TensorRtLlm => {
            put("max_tokens", generation.max_tokens.into())?;
            for (field, input) in [
                ("temperature", "temperature"),
                ("top_p", "top_p"),
                ("top_k", "top_k"),
                ("seed", "seed"),
                ("presence_penalty", "presence_penalty"),
                ("frequency_penalty", "frequency_penalty"),
                ("stop", "stop_words"),
            ] {
                if let Some(value) = generation.sampling.get(field) {
                    put(input, value.clone())?;
                }
            }
            if let Some(schema) = &generation.json_schema {
                let declared = spec
                    .inputs
                    .iter()
                    .any(|t| t.name == "guided_decoding_guide");
                if !declared {
                    return Err(ApiError::invalid_param(
                        "response_format",
                        format!(
                            "model '{}' does not take guided decoding (no 'guided_decoding_guide' input)",
                            spec.name
                        ),
                    ));
                }
                put(
                    "guided_decoding_guide_type",
                    Value::String("json_schema".into()),
                )?;
                put("guided_decoding_guide", Value::String(schema.to_string()))?;
            }
        }
    }
    Ok(inference_request(spec, inputs))
}

/// An ordinary inference request of `inputs` to the version of `spec`, every output asked.
pub fn inference_request(spec: &ModelSpec, inputs: Vec<InputTensor>) -> InferRequest {
    InferRequest {
        model_name: spec.name.clone(),
        model_version: Some(spec.version),
        id: String::new(),
        parameters: Vec::new(),
        inputs,
        requested_outputs: None,
        classification: Vec::new(),
        trace: None,
        output_query: None,
    }
}

/// `value` as input `tensor` of `spec`: its declared datatype, its dims with every
/// variable dimension 1 (the last one the element count of a list), and the batch
/// dimension 1 in front for a batching model.
pub fn tensor_of(spec: &ModelSpec, tensor: &TensorSpec, value: &Value) -> ApiResult<InputTensor> {
    let elements: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let count = i64::try_from(elements.len()).unwrap_or(i64::MAX);
    let mut shape: Vec<i64> = Vec::with_capacity(tensor.dims.len() + 1);
    if spec.max_batch_size > 0 {
        shape.push(1);
    }
    let last_variable = tensor.dims.iter().rposition(|d| *d < 0);
    for (i, dim) in tensor.dims.iter().enumerate() {
        shape.push(match (*dim < 0, Some(i) == last_variable) {
            (true, true) => count,
            (true, false) => 1,
            (false, _) => *dim,
        });
    }
    let wrong = |what: &str| {
        ApiError::internal(format!(
            "model '{}' declares input '{}' as {:?}, which cannot hold {what}",
            spec.name, tensor.name, tensor.datatype
        ))
    };
    let data = match tensor.datatype {
        DataType::Bytes => {
            let texts: Vec<String> = elements
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            join_bytes_elements(texts.iter().map(|t| t.as_bytes()))
        }
        DataType::Bool => elements
            .iter()
            .map(|v| v.as_bool().map(u8::from).ok_or_else(|| wrong("a boolean")))
            .collect::<ApiResult<Vec<u8>>>()?,
        DataType::Fp32 | DataType::Fp64 => {
            let mut out = Vec::new();
            for v in &elements {
                let f = v.as_f64().ok_or_else(|| wrong("a number"))?;
                if tensor.datatype == DataType::Fp32 {
                    out.extend_from_slice(&(f as f32).to_le_bytes());
                } else {
                    out.extend_from_slice(&f.to_le_bytes());
                }
            }
            out
        }
        DataType::Int32 | DataType::Int64 | DataType::Uint32 | DataType::Uint64 => {
            let mut out = Vec::new();
            for v in &elements {
                let i = v
                    .as_i64()
                    .map(i128::from)
                    .or_else(|| v.as_u64().map(i128::from))
                    .ok_or_else(|| wrong("an integer"))?;
                let fits = match tensor.datatype {
                    DataType::Int32 => i32::try_from(i).map(|x| out.extend(x.to_le_bytes())),
                    DataType::Uint32 => u32::try_from(i).map(|x| out.extend(x.to_le_bytes())),
                    DataType::Int64 => i64::try_from(i).map(|x| out.extend(x.to_le_bytes())),
                    _ => u64::try_from(i).map(|x| out.extend(x.to_le_bytes())),
                };
                fits.map_err(|_| {
                    ApiError::invalid(format!(
                        "{i} does not fit input '{}' ({:?}) of model '{}'",
                        tensor.name, tensor.datatype, spec.name
                    ))
                })?;
            }
            out
        }
        _ => return Err(wrong("an OpenAI request field")),
    };
    Ok(InputTensor {
        name: tensor.name.clone(),
        datatype: tensor.datatype,
        shape,
        data: Bytes::from(data),
        device: None,
    })
}

/// The piece of text and counts in one response.
pub fn piece(response: &InferResponse) -> ApiResult<Piece> {
    let output = |name: &str| response.outputs.iter().find(|o| o.name == name);
    let text = match output("text_output") {
        Some(o) => texts(o)?.concat(),
        None => String::new(),
    };
    Ok(Piece {
        text,
        input_tokens: output("num_input_tokens").and_then(first_integer),
        output_tokens: output("num_output_tokens").and_then(first_integer),
        finish_reason: output("finish_reason")
            .and_then(|o| texts(o).ok())
            .and_then(|t| t.into_iter().next())
            .filter(|r| !r.is_empty()),
    })
}

/// The elements of a BYTES output as UTF-8 text (invalid bytes replaced).
pub fn texts(output: &OutputTensor) -> ApiResult<Vec<String>> {
    if output.datatype != DataType::Bytes {
        return Err(ApiError::internal(format!(
            "output '{}' is {:?}, not BYTES",
            output.name, output.datatype
        )));
    }
    let elements = split_bytes_elements(&output.data)
        .map_err(|e| ApiError::internal(format!("output '{}': {e}", output.name)))?;
    Ok(elements
        .into_iter()
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect())
}

/// The first element of an integer output.
fn first_integer(output: &OutputTensor) -> Option<u64> {
    let bytes = &output.data;
    let take = |n: usize| bytes.get(..n);
    match output.datatype {
        DataType::Int32 => take(4)
            .and_then(|b| b.try_into().ok())
            .and_then(|b| u64::try_from(i32::from_le_bytes(b)).ok()),
        DataType::Uint32 => take(4)
            .and_then(|b| b.try_into().ok())
            .map(|b| u64::from(u32::from_le_bytes(b))),
        DataType::Int64 => take(8)
            .and_then(|b| b.try_into().ok())
            .and_then(|b| u64::try_from(i64::from_le_bytes(b)).ok()),
        DataType::Uint64 => take(8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::testing;

    fn spec(config: &str) -> std::sync::Arc<ModelSpec> {
        testing::spec("m", config)
    }

    #[test]
    fn only_declared_inputs_in_their_types_and_shapes() {
        let spec = spec(
            r#"backend: "python" max_batch_size: 0
            input [ { name: "text_input" data_type: TYPE_STRING dims: [1, 1] },
                    { name: "stream" data_type: TYPE_BOOL dims: [1, 1] },
                    { name: "max_tokens" data_type: TYPE_INT32 dims: [1, 1] },
                    { name: "stop_words" data_type: TYPE_STRING dims: [1, -1] } ]
            output [ { name: "text_output" data_type: TYPE_STRING dims: [1, -1] } ]"#,
        );
        let mut sampling = Map::new();
        sampling.insert("stop".into(), serde_json::json!(["a", "b"]));
        sampling.insert("temperature".into(), serde_json::json!(0.5));
        let generation = Generation {
            prompt: "hi".into(),
            stream: true,
            max_tokens: 7,
            sampling,
            ..Generation::default()
        };
        let r = request(&spec, Convention::TensorRtLlm, &generation).expect("built");
        let names: Vec<&str> = r.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["text_input", "stream", "max_tokens", "stop_words"]);
        assert_eq!(r.inputs[0].shape, vec![1, 1]);
        assert_eq!(
            r.inputs[0].data.as_ref(),
            join_bytes_elements([b"hi".as_slice()])
        );
        assert_eq!(r.inputs[1].data.as_ref(), [1]);
        assert_eq!(r.inputs[2].data.as_ref(), 7i32.to_le_bytes());
        assert_eq!(r.inputs[3].shape, vec![1, 2]);
    }

    #[test]
    fn vllm_gets_its_sampling_parameters_as_json() {
        let spec = spec(
            r#"backend: "vllm" max_batch_size: 0
            input [ { name: "text_input" data_type: TYPE_STRING dims: [1] },
                    { name: "stream" data_type: TYPE_BOOL dims: [1] },
                    { name: "sampling_parameters" data_type: TYPE_STRING dims: [1] },
                    { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [1] } ]
            output [ { name: "text_output" data_type: TYPE_STRING dims: [-1] } ]"#,
        );
        let mut sampling = Map::new();
        sampling.insert("temperature".into(), serde_json::json!(0.0));
        let generation = Generation {
            prompt: "p".into(),
            max_tokens: 3,
            sampling,
            json_schema: Some(serde_json::json!({})),
            ..Generation::default()
        };
        let r = request(&spec, Convention::Vllm, &generation).expect("built");
        let input = |name: &str| r.inputs.iter().find(|i| i.name == name).expect(name);
        let json = input("sampling_parameters");
        let text = split_bytes_elements(&json.data).expect("one element")[0].to_vec();
        let value: Value = serde_json::from_slice(&text).expect("json");
        assert_eq!(value["max_tokens"], 3);
        assert_eq!(value["temperature"], 0.0);
        assert_eq!(value["structured_outputs"], r#"{"json_object":true}"#);
        let exclude = input("exclude_input_in_output");
        assert_eq!(exclude.data.as_ref(), [1], "the frontend echoes");
    }

    #[test]
    fn pieces_read_text_counts_and_reason() {
        let bytes = |name: &str, items: &[&str]| OutputTensor {
            name: name.into(),
            datatype: DataType::Bytes,
            shape: vec![items.len() as i64],
            data: Bytes::from(join_bytes_elements(items.iter().map(|s| s.as_bytes()))),
            device: None,
        };
        let response = InferResponse {
            model_name: "m".into(),
            model_version: 1,
            id: String::new(),
            parameters: Vec::new(),
            outputs: vec![
                bytes("text_output", &["he", "llo"]),
                OutputTensor {
                    name: "num_output_tokens".into(),
                    datatype: DataType::Uint32,
                    shape: vec![1],
                    data: Bytes::from(2u32.to_le_bytes().to_vec()),
                    device: None,
                },
                bytes("finish_reason", &["length"]),
            ]
            .into(),
        };
        let p = piece(&response).expect("read");
        assert_eq!(p.text, "hello");
        assert_eq!(p.output_tokens, Some(2));
        assert_eq!(p.input_tokens, None);
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
    }
}
