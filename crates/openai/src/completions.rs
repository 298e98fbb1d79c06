//! `POST /v1/completions`: a prompt (text, texts, token ids or lists of them) completed by
//! an LLM of the repository, whole or streamed.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::stream::StreamExt;
use nereid_chat::ModelText;
use serde_json::{json, Value};

use crate::body::decode;
use crate::catalog::{Served, Task};
use crate::choices::{self, Plan};
use crate::error::{ApiError, ApiResult};
use crate::generate::Step;
use crate::schema::{CompletionRequest, Prompt};
use crate::sse;
use crate::AppState;

pub(crate) async fn handle(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let request: CompletionRequest =
        decode(&state, &headers, body, |r: &CompletionRequest| &r.unknown).await?;
    request.sampling.check()?;
    if request.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param(
            "suffix",
            "'suffix' is not supported",
        ));
    }
    let served = state.catalog.get(&request.model).await?;
    let convention = generating(&served)?;
    if request.logprobs.is_some_and(|n| n > 0) {
        return Err(ApiError::invalid_param(
            "logprobs",
            format!(
                "model '{}' does not report log probabilities",
                request.model
            ),
        ));
    }
    let prompts = prompt_texts(&request.prompt, served.text.as_deref())?;
    let plan = Plan {
        served: &served,
        convention,
        sampling: &request.sampling,
        unknown: &request.unknown,
        max_tokens: request
            .sampling
            .max_tokens
            .unwrap_or(state.options.default_max_tokens),
        json_schema: None,
    };
    let runs = choices::start(&state, &plan, &prompts)?;
    let n = request.sampling.choices() as usize;
    let echoes: Vec<String> = prompts
        .iter()
        .flat_map(|p| std::iter::repeat_n(p.clone(), n))
        .map(|p| if request.echo { p } else { String::new() })
        .collect();
    let answer = sse::Answer::new("cmpl-", &request.model);
    if !request.sampling.stream {
        let done = choices::collect(runs).await?;
        let finishes: Vec<_> = done.iter().map(|(_, f)| f.clone()).collect();
        let choices: Vec<Value> = done
            .into_iter()
            .zip(echoes)
            .enumerate()
            .map(|(index, ((text, finish), echo))| {
                json!({
                    "index": index,
                    "text": echo + &text,
                    "logprobs": null,
                    "finish_reason": finish.reason,
                })
            })
            .collect();
        let usage = sse::usage(&finishes, n);
        return Ok(axum::Json(answer.whole("text_completion", choices, usage)).into_response());
    }
    let include_usage = request.sampling.include_usage();
    let chunk =
        move |choices: Value, usage: Option<Value>| answer.chunk("text_completion", choices, usage);
    let mut merged = sse::merged(runs);
    let chunks = async_stream::stream! {
        let mut finishes = vec![None; echoes.len()];
        for (index, echo) in echoes.iter().enumerate() {
            if !echo.is_empty() {
                yield chunk(json!([{"index": index, "text": echo, "logprobs": null, "finish_reason": null}]), None);
            }
        }
        while let Some((index, step)) = merged.next().await {
            match step {
                Ok(Step::Text(text)) => {
                    yield chunk(json!([{"index": index, "text": text, "logprobs": null, "finish_reason": null}]), None);
                }
                Ok(Step::Finished(finish)) => {
                    yield chunk(json!([{"index": index, "text": "", "logprobs": null, "finish_reason": finish.reason}]), None);
                    if let Some(slot) = finishes.get_mut(index as usize) {
                        *slot = Some(finish);
                    }
                }
                Err(e) => {
                    yield e.body();
                    return;
                }
            }
        }
        if include_usage {
            let finishes: Vec<_> = finishes.into_iter().flatten().collect();
            yield chunk(json!([]), Some(sse::usage(&finishes, n)));
        }
    };
    Ok(sse::events(chunks.boxed()))
}

/// The convention of a generating model, or a 400 for an embedding model.
pub(crate) fn generating(served: &Served) -> ApiResult<crate::catalog::Convention> {
    match served.task {
        Task::Generate(convention) => Ok(convention),
        _ => Err(ApiError::invalid_param(
            "model",
            format!(
                "model '{}' is an embedding model: use /v1/embeddings",
                served.spec.name
            ),
        )),
    }
}

/// The prompts as text: token ids are decoded with the model's tokenizer.
fn prompt_texts(prompt: &Prompt, text: Option<&ModelText>) -> ApiResult<Vec<String>> {
    let decode = |ids: &[u32]| -> ApiResult<String> {
        let tokenizer = text.filter(|t| t.has_tokenizer()).ok_or_else(|| {
            ApiError::invalid_param(
                "prompt",
                "token ids need the model's tokenizer (tokenizer.json in its folder, or --tokenizer)",
            )
        })?;
        tokenizer
            .decode(ids, false)
            .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))
    };
    let prompts = match prompt {
        Prompt::Text(t) => vec![t.clone()],
        Prompt::Texts(ts) => ts.clone(),
        Prompt::Tokens(ids) => vec![decode(ids)?],
        Prompt::TokenLists(lists) => lists
            .iter()
            .map(|ids| decode(ids))
            .collect::<ApiResult<_>>()?,
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid_param("prompt", "'prompt' is empty"));
    }
    Ok(prompts)
}
