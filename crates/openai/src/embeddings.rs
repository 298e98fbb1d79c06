//! `POST /v1/embeddings`: one vector per input, from either kind of embedding model —
//! vLLM's convention (`embedding_request` JSON in, the vector as JSON text out, as
//! Triton's frontend reads it), or a transformer of the repository (an ONNX
//! sentence-transformer, say) fed token ids from the model's own tokenizer, whose hidden
//! states are mean-pooled over the attention mask and L2-normalized here as
//! sentence-transformers does (`parameters { key: "openai_normalize" value: { string_value:
//! "false" } }` keeps them raw). Each input is one ordinary inference request.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::future::join_all;
use nereid_core::model::ModelSpec;
use nereid_core::request::{InferRequest, InferResponse, OutputTensor};
use nereid_core::DataType;
use serde_json::{json, Value};

use crate::body::decode;
use crate::catalog::{Served, Task};
use crate::error::{ApiError, ApiResult};
use crate::schema::{EmbeddingInput, EmbeddingRequest};
use crate::tensors::{inference_request, tensor_of, texts};
use crate::AppState;

pub(crate) async fn handle(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let request: EmbeddingRequest =
        decode(&state, &headers, body, |r: &EmbeddingRequest| &r.unknown).await?;
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "encoding_format",
                format!("encoding_format must be 'float' or 'base64', got '{other}'"),
            ))
        }
    };
    let served = state.catalog.get(&request.model).await?;
    let inputs = input_texts(&served, &request.input)?;
    let requests = inputs
        .iter()
        .map(|input| embedding_request(&served, input, request.dimensions))
        .collect::<ApiResult<Vec<_>>>()?;
    let server = state.server();
    let answers = join_all(requests.into_iter().map(|(r, tokens)| {
        let answer = server.infer(r);
        async move { (answer.await, tokens) }
    }))
    .await;
    let mut data = Vec::with_capacity(answers.len());
    let mut prompt_tokens = 0u64;
    for (index, (answer, tokens)) in answers.into_iter().enumerate() {
        let response = answer?;
        let (vector, counted) = read_vector(&served, &response, tokens)?;
        let vector = fit(&served.spec, vector, request.dimensions)?;
        prompt_tokens += counted;
        let embedding = if base64 {
            let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        } else {
            json!(vector)
        };
        data.push(json!({"object": "embedding", "index": index, "embedding": embedding}));
    }
    Ok(axum::Json(json!({
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }))
    .into_response())
}

/// One input as the model takes it: text, or token ids.
enum Item {
    Text(String),
    Ids(Vec<u32>),
}

fn input_texts(served: &Served, input: &EmbeddingInput) -> ApiResult<Vec<Item>> {
    if !matches!(served.task, Task::EmbedJson | Task::EmbedTokens) {
        return Err(ApiError::invalid_param(
            "model",
            format!("model '{}' is not an embedding model", served.spec.name),
        ));
    }
    let items: Vec<Item> = match input {
        EmbeddingInput::Text(t) => vec![Item::Text(t.clone())],
        EmbeddingInput::Texts(ts) => ts.iter().cloned().map(Item::Text).collect(),
        EmbeddingInput::Tokens(ids) => vec![Item::Ids(ids.clone())],
        EmbeddingInput::TokenLists(lists) => lists.iter().cloned().map(Item::Ids).collect(),
    };
    if items.is_empty()
        || items
            .iter()
            .any(|i| matches!(i, Item::Text(t) if t.is_empty()))
    {
        return Err(ApiError::invalid_param(
            "input",
            "'input' must not be empty",
        ));
    }
    Ok(items)
}

/// The inference request for one input, with its token count when known here.
fn embedding_request(
    served: &Served,
    item: &Item,
    dimensions: Option<u32>,
) -> ApiResult<(InferRequest, Option<u64>)> {
    let spec = &served.spec;
    let input = |name: &str| spec.inputs.iter().find(|t| t.name == name);
    let mut inputs = Vec::new();
    let mut tokens = None;
    match served.task {
        Task::EmbedJson => {
            let value = match item {
                Item::Text(t) => json!(t),
                Item::Ids(ids) => json!(ids),
            };
            let mut pooling = serde_json::Map::new();
            if let Some(d) = dimensions {
                pooling.insert("dimensions".into(), json!([d]));
            }
            let body = json!({"input": value, "pooling_params": pooling}).to_string();
            for (name, value) in [
                ("embedding_request", Value::String(body)),
                ("return_num_input_tokens", Value::Bool(true)),
                ("return_num_output_tokens", Value::Bool(true)),
            ] {
                if let Some(tensor) = input(name) {
                    inputs.push(tensor_of(spec, tensor, &value)?);
                }
            }
        }
        _ => {
            let ids = match item {
                Item::Ids(ids) => ids.clone(),
                Item::Text(t) => served
                    .text
                    .as_ref()
                    .filter(|t| t.has_tokenizer())
                    .ok_or_else(|| {
                        ApiError::internal(format!(
                            "embedding model '{}' has no tokenizer.json",
                            spec.name
                        ))
                    })?
                    .encode(t, true)
                    .map_err(|e| ApiError::invalid_param("input", e.to_string()))?,
            };
            tokens = Some(ids.len() as u64);
            for (name, fill) in [
                ("input_ids", None),
                ("attention_mask", Some(1)),
                ("token_type_ids", Some(0)),
            ] {
                let Some(tensor) = input(name) else {
                    if name == "input_ids" {
                        return Err(ApiError::internal(format!(
                            "embedding model '{}' has no 'input_ids' input",
                            spec.name
                        )));
                    }
                    continue;
                };
                let values: Vec<Value> = match fill {
                    None => ids.iter().map(|i| json!(i)).collect(),
                    Some(v) => ids.iter().map(|_| json!(v)).collect(),
                };
                let mut built = tensor_of(spec, tensor, &Value::Array(values))?;
                // One sequence of the ids' length, whatever the batch layout.
                built.shape = vec![1, ids.len() as i64];
                inputs.push(built);
            }
        }
    }
    Ok((inference_request(spec, inputs), tokens))
}

/// The vector of one response and its prompt tokens.
fn read_vector(
    served: &Served,
    response: &InferResponse,
    tokens: Option<u64>,
) -> ApiResult<(Vec<f32>, u64)> {
    let name = &served.spec.name;
    if served.task == Task::EmbedJson {
        let output = response
            .outputs
            .iter()
            .find(|o| o.name == "text_output")
            .ok_or_else(|| ApiError::internal(format!("model '{name}' gave no 'text_output'")))?;
        let text = texts(output)?.concat();
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| ApiError::internal(format!("model '{name}' gave no JSON vector: {e}")))?;
        let flat = match value {
            Value::Array(items) if items.first().is_some_and(Value::is_array) => items[0].clone(),
            other => other,
        };
        let vector: Vec<f32> = serde_json::from_value(flat)
            .map_err(|e| ApiError::internal(format!("model '{name}' gave no vector: {e}")))?;
        let counted = response
            .outputs
            .iter()
            .find(|o| o.name == "num_input_tokens")
            .and_then(|o| o.data.get(..4))
            .and_then(|b| b.try_into().ok())
            .map(|b| u64::from(u32::from_le_bytes(b)))
            .unwrap_or(0);
        return Ok((vector, counted));
    }
    let output = response
        .outputs
        .iter()
        .find(|o| o.name == "sentence_embedding")
        .or_else(|| response.outputs.first())
        .ok_or_else(|| ApiError::internal(format!("model '{name}' gave no output")))?;
    let values = fp32s(output)?;
    let vector = match output.shape.len() {
        // [1, H]: already pooled.
        2 => values,
        // [1, L, H]: mean over the tokens (every token is attended here: one sequence).
        3 => {
            let (len, hidden) = (dim(output, 1)?, dim(output, 2)?);
            mean_pool(&values, len, hidden)
        }
        _ => {
            return Err(ApiError::internal(format!(
                "model '{name}' output '{}' has shape {:?}; expected [1, H] or [1, L, H]",
                output.name, output.shape
            )))
        }
    };
    let normalize = served
        .spec
        .parameters
        .get("openai_normalize")
        .map(String::as_str)
        != Some("false");
    let vector = if normalize {
        l2_normalized(vector)
    } else {
        vector
    };
    Ok((vector, tokens.unwrap_or(0)))
}

fn dim(output: &OutputTensor, i: usize) -> ApiResult<usize> {
    output
        .shape
        .get(i)
        .and_then(|d| usize::try_from(*d).ok())
        .ok_or_else(|| ApiError::internal(format!("output '{}' has no dimension {i}", output.name)))
}

fn fp32s(output: &OutputTensor) -> ApiResult<Vec<f32>> {
    if output.datatype != DataType::Fp32 {
        return Err(ApiError::internal(format!(
            "output '{}' is {:?}; embeddings are read from FP32",
            output.name, output.datatype
        )));
    }
    Ok(output
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The mean of `len` rows of `hidden` values.
fn mean_pool(values: &[f32], len: usize, hidden: usize) -> Vec<f32> {
    let mut sum = vec![0f32; hidden];
    for row in values.chunks_exact(hidden.max(1)).take(len) {
        for (s, v) in sum.iter_mut().zip(row) {
            *s += v;
        }
    }
    let count = len.max(1) as f32;
    sum.into_iter().map(|s| s / count).collect()
}

fn l2_normalized(vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
    vector.into_iter().map(|v| v / norm).collect()
}

/// `dimensions`: the leading values, renormalized, where the model's config allows it
/// (`openai_matryoshka: "true"`, or a vLLM model, which checks it itself).
fn fit(spec: &ModelSpec, vector: Vec<f32>, dimensions: Option<u32>) -> ApiResult<Vec<f32>> {
    let Some(d) = dimensions.map(|d| d as usize) else {
        return Ok(vector);
    };
    if d == vector.len() {
        return Ok(vector);
    }
    let allowed = spec.parameters.get("openai_matryoshka").map(String::as_str) == Some("true");
    if !allowed || d == 0 || d > vector.len() {
        return Err(ApiError::invalid_param(
            "dimensions",
            format!(
                "model '{}' gives {} dimensions and cannot give {d}",
                spec.name,
                vector.len()
            ),
        ));
    }
    Ok(l2_normalized(vector.into_iter().take(d).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_and_normalization_as_sentence_transformers() {
        let pooled = mean_pool(&[1.0, 2.0, 3.0, 4.0], 2, 2);
        assert_eq!(pooled, vec![2.0, 3.0]);
        let unit = l2_normalized(vec![3.0, 4.0]);
        assert_eq!(unit, vec![0.6, 0.8]);
    }
}
