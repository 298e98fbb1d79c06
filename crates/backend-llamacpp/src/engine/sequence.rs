//! One request while it holds a sequence slot: its prompt still to read, its sampler,
//! the text held back, and the responses it sends, in the output convention of Triton's
//! vLLM backend (`text_output`, plus `finish_reason`, `cumulative_logprob`,
//! `num_input_tokens` and `num_output_tokens` when asked for).

use std::time::{Duration, Instant};

use bytes::Bytes;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use nereid_core::request::{join_bytes_elements, OutputTensor};
use nereid_core::response_stream::ResponseSender;
use nereid_core::{DataType, Error};

use crate::request::Generation;
use crate::text::TextStream;

/// Why a sequence ended, as vLLM names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token, a stop token id or a stop string.
    Stop,
    /// `max_tokens`, or the sequence's context is full.
    Length,
}

impl Finish {
    fn name(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// A request admitted to the engine: what it asks and where its answers go.
pub struct Job {
    /// The request's generation settings.
    pub generation: Generation,
    /// Its prompt, tokenized.
    pub prompt: Vec<LlamaToken>,
    /// Its answer stream.
    pub sender: ResponseSender,
    /// Whether outputs carry the batch dimension (a model with `max_batch_size` > 0).
    pub batched: bool,
    /// When the request reached the instance (the time to first token starts here).
    pub arrived: Instant,
}

/// A request generating in one slot.
pub struct Sequence {
    job: Job,
    sampler: LlamaSampler,
    /// Prompt tokens already in the KV cache.
    prefilled: usize,
    /// Positions this sequence holds in the KV cache.
    past: i32,
    /// The token sampled last, to be fed at the next step.
    next: Option<LlamaToken>,
    text: TextStream,
    /// Tokens generated so far.
    generated: u32,
    /// Tokens generated since the last response (for `num_output_tokens`).
    unreported: u32,
    /// The whole answer of a request that is not streamed.
    answer: String,
    logprob_sum: f64,
    /// When the last token was generated (the request's arrival before the first).
    last_token_at: Instant,
}

impl Sequence {
    /// Starts `job` with its sampler.
    pub fn new(job: Job, sampler: LlamaSampler) -> Self {
        let sampling = &job.generation.sampling;
        let text = TextStream::new(sampling.stop.clone(), sampling.include_stop_str_in_output);
        let arrived = job.arrived;
        Self {
            job,
            sampler,
            prefilled: 0,
            past: 0,
            next: None,
            text,
            generated: 0,
            unreported: 0,
            answer: String::new(),
            logprob_sum: 0.0,
            last_token_at: arrived,
        }
    }

    /// Prompt tokens not in the KV cache yet.
    pub fn unread_prompt(&self) -> &[LlamaToken] {
        &self.job.prompt[self.prefilled..]
    }

    /// Marks `n` more prompt tokens as read into the KV cache.
    pub fn read_prompt(&mut self, n: usize) {
        self.prefilled += n;
        self.past += n as i32;
    }

    /// Positions this sequence holds in the KV cache: where its next token goes.
    pub fn past(&self) -> i32 {
        self.past
    }

    /// Whether a token was sampled and waits to be fed, and the client has room for
    /// what it will produce (a client behind pauses only its own sequence).
    pub fn ready_to_feed(&self) -> bool {
        self.next.is_some() && self.job.sender.has_room()
    }

    /// Takes the token sampled last to feed it at position [`Self::past`].
    pub fn feed(&mut self) -> Option<(LlamaToken, i32)> {
        let token = self.next.take()?;
        self.past += 1;
        Some((token, self.past - 1))
    }

    /// The sampler, for drawing this sequence's next token.
    pub fn sampler(&mut self) -> &mut LlamaSampler {
        &mut self.sampler
    }

    /// Whether the client left; the sequence is dropped without another response.
    pub fn is_cancelled(&self) -> bool {
        self.job.sender.is_cancelled()
    }

    /// A token was generated now: the time since the previous one (or since the
    /// request arrived) and whether it is the first.
    pub fn tick(&mut self, now: Instant) -> (Duration, bool) {
        let gap = now.saturating_duration_since(self.last_token_at);
        self.last_token_at = now;
        (gap, self.generated == 0)
    }

    /// The request's settings.
    pub fn generation(&self) -> &Generation {
        &self.job.generation
    }

    /// Takes a sampled token: its text (`piece`), whether it ends the sequence as an
    /// end-of-generation or stop token, and its log probability when asked for.
    /// Returns why the sequence ended, if it did; `room` is whether the context can
    /// take this token for another step.
    pub fn accept(
        &mut self,
        token: LlamaToken,
        piece: &[u8],
        end_of_generation: bool,
        logprob: Option<f64>,
        room: bool,
    ) -> Option<Finish> {
        self.generated += 1;
        self.unreported += 1;
        self.logprob_sum += logprob.unwrap_or(0.0);
        let sampling = &self.job.generation.sampling;
        let stop_token = (end_of_generation && !sampling.ignore_eos)
            || sampling.stop_token_ids.contains(&token.0);
        if stop_token {
            return Some(self.finish(Finish::Stop, true));
        }
        let max_tokens = sampling.max_tokens;
        let emitted = self.text.push(piece);
        self.emit(emitted.text);
        if emitted.stopped {
            return Some(self.finish(Finish::Stop, false));
        }
        if self.generated >= max_tokens || !room {
            return Some(self.finish(Finish::Length, true));
        }
        self.next = Some(token);
        None
    }

    /// Ends the request with `error` (an engine failure, the model unloading).
    pub fn fail(self, error: Error) {
        self.job.sender.send(Err(error), true);
    }

    /// Text that is now certain: streamed at once, or kept for the one answer.
    fn emit(&mut self, text: String) {
        if text.is_empty() {
            return;
        }
        if self.job.generation.stream {
            self.send(text, None, false);
        } else {
            self.answer.push_str(&text);
        }
    }

    /// Sends the last response: the rest of the text (the text held back, unless a
    /// stop string ended it) and why it ended.
    fn finish(&mut self, finish: Finish, flush: bool) -> Finish {
        self.next = None;
        let mut rest = if flush {
            self.text.finish()
        } else {
            String::new()
        };
        if !self.job.generation.stream {
            let mut answer = std::mem::take(&mut self.answer);
            answer.push_str(&rest);
            rest = if self.job.generation.exclude_input_in_output {
                answer
            } else {
                format!("{}{answer}", self.job.generation.prompt)
            };
        }
        self.send(rest, Some(finish), true);
        finish
    }

    fn send(&mut self, text: String, finish: Option<Finish>, last: bool) {
        let outputs = self.outputs(text, finish);
        self.unreported = 0;
        self.job.sender.send(Ok(outputs), last);
    }

    /// One response's tensors: the text, and the optional outputs asked for.
    fn outputs(&self, text: String, finish: Option<Finish>) -> Vec<OutputTensor> {
        let returns = self.job.generation.returns;
        let shape = if self.job.batched {
            vec![1, 1]
        } else {
            vec![1]
        };
        let tensor = |name: &str, datatype, data: Vec<u8>| OutputTensor {
            name: name.into(),
            datatype,
            shape: shape.clone(),
            data: Bytes::from(data),
            device: None,
        };
        let mut outputs = vec![tensor(
            "text_output",
            DataType::Bytes,
            join_bytes_elements([text.as_bytes()]),
        )];
        if let (true, Some(finish)) = (returns.finish_reason, finish) {
            outputs.push(tensor(
                "finish_reason",
                DataType::Bytes,
                join_bytes_elements([finish.name().as_bytes()]),
            ));
        }
        if returns.cumulative_logprob {
            outputs.push(tensor(
                "cumulative_logprob",
                DataType::Fp32,
                (self.logprob_sum as f32).to_le_bytes().to_vec(),
            ));
        }
        if returns.num_input_tokens {
            let n = self.job.prompt.len() as u32;
            outputs.push(tensor(
                "num_input_tokens",
                DataType::Uint32,
                n.to_le_bytes().to_vec(),
            ));
        }
        if returns.num_output_tokens {
            let n = if self.job.generation.stream {
                self.unreported
            } else {
                self.generated
            };
            outputs.push(tensor(
                "num_output_tokens",
                DataType::Uint32,
                n.to_le_bytes().to_vec(),
            ));
        }
        outputs
    }
}
