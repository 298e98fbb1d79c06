//! Running one choice: the request goes to the core facade like any other (statistics,
//! metrics, tracing, the rate limiter and the response cache apply), and its responses
//! come back as text steps and a last step with the finish reason and token counts.
//! Dropping a [`ChoiceRun`] drops the model's response stream, which the backend sees as
//! a cancelled request: a client that goes away, or a stop string found here, stops the
//! generation at the model's next response.
//!
//! Every run counts into its model's [`ModelLlmMetrics`]: the time to its first token and
//! between tokens as responses arrive (only when the model streams: one whole answer has
//! no token times to tell), and its tokens and finish reason once, when it ends: at the
//! finish, or as `abort` when it is dropped before (a failed run is counted by the core's
//! failure counters, not here).

use std::sync::Arc;
use std::time::Instant;

use futures::stream::{self, BoxStream, StreamExt};
use nereid_chat::ModelText;
use nereid_core::response_stream::ResponseStream;

use crate::error::{ApiError, ApiResult};
use crate::metrics::ModelLlmMetrics;
use crate::stop::StopScanner;
use crate::tensors::{self, Generation};
use crate::AppState;

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
    // The model version's metrics, looked up once at the start.
    metrics: Arc<ModelLlmMetrics>,
    // When the request was submitted, and when the last response with text came (`None`
    // before the first); `None` when the model does not stream.
    submitted: Option<Instant>,
    last_token: Option<Instant>,
    // Set once the run is counted in `metrics` (or, failed, never will be).
    counted: bool,
}

impl ChoiceRun {
    /// Submits `generation` to the model of `spec` and returns the run.
    pub fn start(
        state: &AppState,
        spec: &nereid_core::model::ModelSpec,
        convention: crate::catalog::Convention,
        generation: &Generation,
        stops: Vec<String>,
        text: Option<Arc<ModelText>>,
    ) -> ApiResult<Self> {
        let request = tensors::request(spec, convention, generation)?;
        let metrics = state.llm.model(&spec.name, spec.version);
        let submitted = generation.stream.then(Instant::now);
        let answers = state.server().submit_stream(request)?;
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
            metrics,
            submitted,
            last_token: None,
            counted: false,
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
                    self.counted = true;
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
                self.time_token();
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
        let (prompt_tokens, completion_tokens) = self.usage();
        let reason = self.reason.clone().unwrap_or_else(|| {
            if completion_tokens >= u64::from(self.max_tokens) {
                "length".into()
            } else {
                "stop".into()
            }
        });
        self.counted = true;
        self.metrics
            .finished(&reason, prompt_tokens, completion_tokens);
        Step::Finished(Finish {
            reason,
            prompt_tokens,
            completion_tokens,
        })
    }

    /// Records a response with text in the token-time histograms: the first one's time
    /// since the submission, each later one's since the one before.
    fn time_token(&mut self) {
        let Some(submitted) = self.submitted else {
            return;
        };
        let now = Instant::now();
        match self.last_token.replace(now) {
            None => self.metrics.first_token(now - submitted),
            Some(previous) => self.metrics.next_token(now - previous),
        }
    }

    /// Prompt and generated tokens so far: as the model reported them, else counted by
    /// the tokenizer, else 0 prompt tokens and one generated token per response with
    /// text.
    fn usage(&self) -> (u64, u64) {
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
        (prompt_tokens, completion_tokens)
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

impl Drop for ChoiceRun {
    /// A run dropped before its finish (the client went away, or another choice of the
    /// request failed) is counted as `abort`, with the tokens it had.
    fn drop(&mut self) {
        if !self.counted {
            let (prompt_tokens, completion_tokens) = self.usage();
            self.metrics
                .finished("abort", prompt_tokens, completion_tokens);
        }
    }
}
