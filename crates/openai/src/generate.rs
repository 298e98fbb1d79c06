//! Running one choice: the request goes to the core facade like any other (statistics,
//! metrics, tracing, the rate limiter and the response cache apply), and its responses
//! come back as text steps and a last step with the finish reason and token counts.
//! Dropping a [`ChoiceRun`] drops the model's response stream, which the backend sees as
//! a cancelled request: a client that goes away, or a stop string found here, stops the
//! generation at the model's next response.

use std::sync::Arc;

use futures::stream::{self, BoxStream, StreamExt};
use nereid_chat::ModelText;
use nereid_core::response_stream::ResponseStream;
use nereid_core::Server;

use crate::error::{ApiError, ApiResult};
use crate::stop::StopScanner;
use crate::tensors::{self, Generation};

/// How a choice ended, with its usage.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    /// `stop` or `length` (or the model's own word).
    pub reason: String,
    /// Prompt tokens (reported by the model, else counted by the tokenizer, else 0).
    pub prompt_tokens: u64,
    /// Generated tokens (reported by the model, else counted by the tokenizer, else one
    /// per response with text).
    pub completion_tokens: u64,
}

/// One step of a choice.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// New text (never empty).
    Text(String),
    /// The end.
    Finished(Finish),
}

/// A choice being generated.
pub struct ChoiceRun {
    answers: Option<ResponseStream>,
    stop: StopScanner,
    max_tokens: u32,
    prompt: String,
    text: Option<Arc<ModelText>>,
    // What the responses said so far.
    produced: String,
    reason: Option<String>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    responses_with_text: u64,
    // Set once the last step has been returned.
    done: bool,
}

impl ChoiceRun {
    /// Submits `generation` to the model of `served` and returns the run.
    pub fn start(
        server: &Server,
        spec: &nereid_core::model::ModelSpec,
        convention: crate::catalog::Convention,
        generation: &Generation,
        stops: Vec<String>,
        text: Option<Arc<ModelText>>,
    ) -> ApiResult<Self> {
        let request = tensors::request(spec, convention, generation)?;
        let answers = server.submit_stream(request)?;
        Ok(Self {
            answers: Some(answers),
            stop: StopScanner::new(stops),
            max_tokens: generation.max_tokens,
            prompt: generation.prompt.clone(),
            text,
            produced: String::new(),
            reason: None,
            prompt_tokens: None,
            completion_tokens: None,
            responses_with_text: 0,
            done: false,
        })
    }

    /// The next step; `None` after the finish.
    pub async fn next(&mut self) -> Option<ApiResult<Step>> {
        if self.done {
            return None;
        }
        loop {
            let Some(answers) = self.answers.as_mut() else {
                return Some(Ok(self.finish()));
            };
            let Some(message) = answers.recv().await else {
                // The stream ended without a final flag (the model was unloaded).
                self.answers = None;
                continue;
            };
            if message.last {
                self.answers = None;
            }
            let Some(result) = message.result else {
                continue;
            };
            let piece = match result
                .map_err(ApiError::from)
                .and_then(|r| tensors::piece(&r))
            {
                Ok(piece) => piece,
                Err(e) => {
                    self.done = true;
                    self.answers = None;
                    return Some(Err(e));
                }
            };
            if piece.input_tokens.is_some() {
                self.prompt_tokens = piece.input_tokens;
            }
            if let Some(n) = piece.output_tokens {
                self.completion_tokens = Some(self.completion_tokens.unwrap_or(0) + n);
            }
            if piece.finish_reason.is_some() {
                self.reason = piece.finish_reason;
            }
            if !piece.text.is_empty() {
                self.responses_with_text += 1;
            }
            let out = self.stop.push(&piece.text);
            if self.stop.stopped() {
                // Dropping the answers cancels the rest of the generation.
                self.answers = None;
                self.reason = Some("stop".into());
            }
            if !out.is_empty() {
                self.produced.push_str(&out);
                return Some(Ok(Step::Text(out)));
            }
        }
    }

    /// The last step: what is held back, then the finish.
    fn finish(&mut self) -> Step {
        let rest = self.stop.finish();
        if !rest.is_empty() {
            self.produced.push_str(&rest);
            return Step::Text(rest);
        }
        self.done = true;
        let count = |text: &str| {
            self.text
                .as_ref()
                .filter(|t| t.has_tokenizer())
                .and_then(|t| t.encode(text, false).ok())
                .map(|ids| ids.len() as u64)
        };
        let completion_tokens = self
            .completion_tokens
            .or_else(|| count(&self.produced))
            .unwrap_or(self.responses_with_text);
        let prompt_tokens = self
            .prompt_tokens
            .or_else(|| count(&self.prompt))
            .unwrap_or(0);
        let reason = self.reason.clone().unwrap_or_else(|| {
            if completion_tokens >= u64::from(self.max_tokens) {
                "length".into()
            } else {
                "stop".into()
            }
        });
        Step::Finished(Finish {
            reason,
            prompt_tokens,
            completion_tokens,
        })
    }

    /// Runs the choice to its end: the whole text and the finish.
    pub async fn collect(mut self) -> ApiResult<(String, Finish)> {
        let mut text = String::new();
        while let Some(step) = self.next().await {
            match step? {
                Step::Text(t) => text.push_str(&t),
                Step::Finished(finish) => return Ok((text, finish)),
            }
        }
        Err(ApiError::internal("the generation ended without a finish"))
    }

    /// The choice as a stream of (choice index, step) items.
    pub fn into_stream(self, index: u32) -> BoxStream<'static, (u32, ApiResult<Step>)> {
        stream::unfold(self, move |mut run| async move {
            run.next().await.map(|step| ((index, step), run))
        })
        .boxed()
    }
}
