//! A decoupled model's answer: any number of responses per request, sent by the backend
//! from any thread and at any time, the last one flagged final (Triton's
//! `TRITONSERVER_RESPONSE_COMPLETE_FINAL`, which may also come alone). The responses
//! waiting for the client are bounded: a backend that produces faster than its client
//! reads waits in `send`, as Triton's backends wait on a full response queue, instead
//! of the server buffering without limit.

use parking_lot::Mutex;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{channel, Receiver, Sender};

use crate::error::Result;
use crate::request::{InferResponse, OutputTensor, Parameters};
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
pub type ResponseStream = Receiver<StreamedResponse>;

/// Responses of one request that may wait for its client before the backend sending
/// them is held back.
pub const RESPONSES_BUFFERED: usize = 32;

/// Turns a backend's outputs into the response the client gets (output selection,
/// `reshape`, model name, version and request id).
pub type ShapeResponse = Box<dyn Fn(Vec<OutputTensor>) -> Result<InferResponse> + Send + Sync>;

/// The end an instance gets for one request of a decoupled model. It may be moved to
/// another thread and outlive the execution; dropping it before a last message ends the
/// stream with an empty final response, so no caller waits forever.
pub struct ResponseSender {
    // `None` once the last message went out. Held while a send waits for room, so the
    // messages of one request keep the order they were sent in.
    tx: Mutex<Option<Sender<StreamedResponse>>>,
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
    /// A sender whose responses are built by `shape`, and the stream that receives them;
    /// [`RESPONSES_BUFFERED`] responses may wait for the caller.
    pub fn channel(shape: ShapeResponse) -> (Self, ResponseStream) {
        Self::holding(RESPONSES_BUFFERED, shape)
    }

    /// [`Self::channel`] where at most `waiting` responses (at least one) wait for the
    /// caller before a send waits: the gRPC frontend's `--grpc-max-response-pool-size`,
    /// which bounds how much of a request's answer the server holds for a slow client.
    pub fn holding(waiting: usize, shape: ShapeResponse) -> (Self, ResponseStream) {
        let (tx, rx) = channel(waiting.max(1));
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
        self.send_with_parameters(outputs, Vec::new(), last)
    }

    /// [`Self::send`] with response parameters the backend set.
    pub fn send_with_parameters(
        &self,
        outputs: Result<Vec<OutputTensor>>,
        parameters: Parameters,
        last: bool,
    ) -> bool {
        let result = outputs.and_then(|o| (self.shape)(o)).map(|mut response| {
            response.parameters.extend(parameters);
            response
        });
        self.push(Some(result), last)
    }

    /// Ends the stream with a final flag and no response.
    pub fn close(&self) -> bool {
        self.push(None, true)
    }

    /// Whether the caller stopped listening (a cancelled request). While a send waits
    /// for room the caller is still there: a caller that leaves wakes that send.
    pub fn is_cancelled(&self) -> bool {
        self.tx
            .try_lock()
            .is_some_and(|tx| tx.as_ref().is_none_or(|tx| tx.is_closed()))
    }

    /// Whether a response sent now goes out without waiting for the client. An engine
    /// that generates for many requests on one thread skips a request whose client is
    /// behind, instead of waiting in `send` and stalling every other request.
    pub fn has_room(&self) -> bool {
        self.tx
            .try_lock()
            .is_some_and(|tx| tx.as_ref().is_some_and(|tx| tx.capacity() > 0))
    }

    fn push(&self, result: Option<Result<InferResponse>>, last: bool) -> bool {
        let mut guard = self.tx.lock();
        let Some(tx) = guard.as_ref() else {
            return false;
        };
        if let (Some(first), Some(_)) = (&self.first_response, &result) {
            first.responded();
        }
        let delivered = deliver(tx, StreamedResponse { result, last });
        if last {
            *guard = None;
        }
        delivered
    }
}

/// Queues `message`, waiting for room when the client is behind: a backend's thread
/// waits in place; a worker of the server's runtime (a streaming ensemble's task, a
/// scheduler task ending a request) waits without stalling the other tasks. Only a
/// single-threaded runtime (tests, embedders' own) cannot wait: the message goes out
/// from a task of its own.
fn deliver(tx: &Sender<StreamedResponse>, message: StreamedResponse) -> bool {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match tx.try_send(message) {
        Ok(()) => true,
        Err(TrySendError::Closed(_)) => false,
        Err(TrySendError::Full(message)) => match Handle::try_current() {
            Err(_) => tx.blocking_send(message).is_ok(),
            Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| tx.blocking_send(message).is_ok())
            }
            Ok(runtime) => {
                let tx = tx.clone();
                runtime.spawn(async move { tx.send(message).await });
                true
            }
        },
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

    #[test]
    fn room_runs_out_when_the_client_is_behind_and_comes_back_when_it_reads() {
        let (sender, mut stream) = ResponseSender::channel(Box::new(|_| {
            Err(Error::internal("an error stands for a response here"))
        }));
        for _ in 0..RESPONSES_BUFFERED {
            assert!(sender.has_room());
            sender.send(Ok(Vec::new()), false);
        }
        assert!(!sender.has_room(), "a send now would wait");
        stream.try_recv().expect("one buffered");
        assert!(sender.has_room());
        sender.close();
        assert!(
            !sender.has_room(),
            "nothing can go out after the last message"
        );
    }

    #[test]
    fn a_sender_holding_one_response_waits_for_the_client_after_one() {
        let (sender, mut stream) = ResponseSender::holding(
            1,
            Box::new(|_| Err(Error::internal("an error stands for a response here"))),
        );
        assert!(sender.has_room());
        sender.send(Ok(Vec::new()), false);
        assert!(!sender.has_room(), "a second send would wait");
        stream.try_recv().expect("the one held");
        assert!(sender.has_room());
        let (none_asked, _stream) = ResponseSender::holding(
            0,
            Box::new(|_| Err(Error::internal("an error stands for a response here"))),
        );
        assert!(none_asked.has_room(), "zero is taken as one");
    }

    #[test]
    fn a_backend_faster_than_its_client_is_held_back() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (sender, mut stream) = ResponseSender::channel(Box::new(|_| {
            Err(Error::internal("an error stands for a response here"))
        }));
        let sent = Arc::new(AtomicUsize::new(0));
        let backend = {
            let sent = sent.clone();
            std::thread::spawn(move || {
                for i in 0..RESPONSES_BUFFERED * 4 {
                    sender.send(Ok(Vec::new()), i + 1 == RESPONSES_BUFFERED * 4);
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        // Unread, the buffer fills and the backend's thread waits.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(sent.load(Ordering::SeqCst), RESPONSES_BUFFERED);
        let mut read = 0;
        while let Some(message) = stream.blocking_recv() {
            read += 1;
            if message.last {
                break;
            }
        }
        backend.join().expect("the backend finishes once read");
        assert_eq!(read, RESPONSES_BUFFERED * 4);
    }
}
