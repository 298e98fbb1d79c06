//! The test backend as a decoupled model (`model_transaction_policy { decoupled: true }`):
//! each request's usual answer sent any number of times, the final flag with the last one
//! or alone, and optionally from another thread after the execution returned.

use std::time::Duration;

use crate::error::Result;
use crate::request::{InferRequest, OutputTensor};
use crate::response_stream::ResponseSender;

/// The request parameter that sets how many responses a request gets.
pub const RESPONSES_PARAMETER: &str = "responses";

/// How a decoupled test model answers each request.
#[derive(Debug, Clone, Copy)]
pub struct Streaming {
    /// Responses per request, unless its [`RESPONSES_PARAMETER`] parameter says otherwise.
    pub responses: u64,
    /// Whether the final flag is sent alone after the responses (Triton's empty final
    /// response); it always is when a request gets no response.
    pub final_alone: bool,
    /// Send everything from another thread this long after the execution returned (a
    /// backend that answers later).
    pub late: Option<Duration>,
}

impl Default for Streaming {
    /// One response carrying the final flag, sent during the execution.
    fn default() -> Self {
        Self {
            responses: 1,
            final_alone: false,
            late: None,
        }
    }
}

impl Streaming {
    /// Sends each request's `answers` to its sender, now or (when [`Self::late`]) from a
    /// thread of its own; a failed answer is the request's one and final response.
    pub(super) fn send(
        self,
        requests: &[&InferRequest],
        answers: Vec<Result<Vec<OutputTensor>>>,
        senders: Vec<ResponseSender>,
    ) {
        let counts: Vec<u64> = requests
            .iter()
            .map(|r| {
                r.u64_parameter(RESPONSES_PARAMETER)
                    .unwrap_or(self.responses)
            })
            .collect();
        let work = move || {
            for ((answer, sender), count) in answers.into_iter().zip(senders).zip(counts) {
                self.answer(answer, &sender, count);
            }
        };
        match self.late {
            Some(delay) => {
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    work();
                });
            }
            None => work(),
        }
    }

    fn answer(&self, answer: Result<Vec<OutputTensor>>, sender: &ResponseSender, count: u64) {
        let outputs = match answer {
            Ok(outputs) => outputs,
            Err(e) => {
                sender.send(Err(e), true);
                return;
            }
        };
        let final_alone = self.final_alone || count == 0;
        for i in 0..count {
            let last = !final_alone && i + 1 == count;
            sender.send(Ok(outputs.clone()), last);
        }
        if final_alone {
            sender.close();
        }
    }
}
