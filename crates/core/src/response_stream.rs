//! A decoupled model's answer: any number of responses per request, sent by the backend
//! from any thread and at any time, the last one flagged final (Triton's
//! `TRITONSERVER_RESPONSE_COMPLETE_FINAL`, which may also come alone).

use parking_lot::Mutex;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::error::Result;
use crate::request::{InferResponse, OutputTensor};
use crate::stats::FirstResponse;

/// One message of a decoupled answer stream.
#[derive(Debug)]
pub struct StreamedResponse {
    /// A response or an error; `None` for a final flag sent alone (Triton's empty final
    /// response, which gRPC clients may ask to receive).
    pub result: Option<Result<InferResponse>>,
    /// Whether the stream ends with this message.
    pub last: bool,
}

/// The end the caller reads; it yields `None` after the message marked `last`.
pub type ResponseStream = UnboundedReceiver<StreamedResponse>;

/// Turns a backend's outputs into the response the client gets (output selection,
/// `reshape`, model name, version and request id).
pub type ShapeResponse = Box<dyn Fn(Vec<OutputTensor>) -> Result<InferResponse> + Send + Sync>;

/// The end an instance gets for one request of a decoupled model. It may be moved to
/// another thread and outlive the execution; dropping it before a last message ends the
/// stream with an empty final response, so no caller waits forever.
pub struct ResponseSender {
    // `None` once the last message went out.
    tx: Mutex<Option<UnboundedSender<StreamedResponse>>>,
    shape: ShapeResponse,
    /// Observes the request's first response (`histogram_latencies`).
    first_response: Option<FirstResponse>,
}

impl std::fmt::Debug for ResponseSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseSender")
    }
}

impl ResponseSender {
    /// A sender whose responses are built by `shape`, and the stream that receives them.
    pub fn channel(shape: ShapeResponse) -> (Self, ResponseStream) {
        let (tx, rx) = unbounded_channel();
        let sender = Self {
            tx: Mutex::new(Some(tx)),
            shape,
            first_response: None,
        };
        (sender, rx)
    }

    /// This sender, reporting the first response it sends (not a final flag alone) to
    /// `first_response`, as Triton's response path does.
    pub fn observing(mut self, first_response: Option<FirstResponse>) -> Self {
        self.first_response = first_response;
        self
    }

    /// Sends one response (or error), ending the stream when `last`. Returns false when
    /// nothing can be delivered any more: the stream already ended or the caller left.
    pub fn send(&self, outputs: Result<Vec<OutputTensor>>, last: bool) -> bool {
        let result = outputs.and_then(|o| (self.shape)(o));
        self.push(Some(result), last)
    }

    /// Ends the stream with a final flag and no response.
    pub fn close(&self) -> bool {
        self.push(None, true)
    }

    /// Whether the caller stopped listening (a cancelled request).
    pub fn is_cancelled(&self) -> bool {
        self.tx.lock().as_ref().is_none_or(|tx| tx.is_closed())
    }

    fn push(&self, result: Option<Result<InferResponse>>, last: bool) -> bool {
        let mut guard = self.tx.lock();
        let Some(tx) = guard.as_ref() else {
            return false;
        };
        if let (Some(first), Some(_)) = (&self.first_response, &result) {
            first.responded();
        }
        let delivered = tx.send(StreamedResponse { result, last }).is_ok();
        if last {
            *guard = None;
        }
        delivered
    }
}

impl Drop for ResponseSender {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::error::Error;
    use crate::stats::histogram::Histogram;
    use crate::stats::ModelStats;

    fn observed(stats: &ModelStats) -> u64 {
        stats
            .latency_metrics()
            .first_response
            .map_or(0, |r| r.count)
    }

    #[test]
    fn the_first_response_is_observed_and_a_final_flag_alone_is_not() {
        let histogram = Histogram::new(vec![100.0]).expect("one bound");
        let stats = Arc::new(ModelStats::default().with_first_response(histogram));
        let sender = |stats: &Arc<ModelStats>| {
            let (sender, stream) = ResponseSender::channel(Box::new(|_| {
                Err(Error::internal("shaped into an error response"))
            }));
            (
                sender.observing(FirstResponse::of(stats, Instant::now())),
                stream,
            )
        };
        let (flag_only, _stream) = sender(&stats);
        flag_only.close();
        assert_eq!(observed(&stats), 0);
        let (several, _stream) = sender(&stats);
        for last in [false, false, true] {
            several.send(Ok(Vec::new()), last);
        }
        assert_eq!(observed(&stats), 1, "one request, one observation");
    }
}
