//! What the backend objects of one request share: where its responses go and how many of
//! its objects (request, factories, responses) are still alive. A non-decoupled request
//! collects its one response for the instance thread waiting on it; a decoupled one
//! forwards each response to its stream. When the last object is gone without a final
//! flag, the request is answered with an error naming the backend, so a backend that
//! forgets a request never leaves its caller waiting. A request the backend reschedules
//! (an iterative sequence's) is not answered: its stream, if any, is handed back for the
//! next execution.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use nereid_core::presence::CallerPresence;
use nereid_core::request::{OutputTensor, Parameters};
use nereid_core::response_stream::ResponseSender;
use nereid_core::{Error, Result};
use parking_lot::{Condvar, Mutex};

use super::single_buffer::SharedState;

/// A request's response channel and live-object count.
pub struct Exchange {
    sink: Sink,
    live: AtomicUsize,
    finished: AtomicBool,
    rescheduled: AtomicBool,
    /// "model 'm' (backend 'b')", for errors.
    origin: String,
    /// Sequence state tensors (`TRITONBACKEND_StateUpdate`), added to the next response.
    states: Mutex<Vec<OutputTensor>>,
    /// States kept in one buffer for input and output, whose value goes out with the
    /// first response whether or not the backend updates them.
    shared: Vec<Arc<SharedState>>,
    /// The parameters the backend set on a collecting request's response.
    parameters: Mutex<Parameters>,
    /// The index the next reported response statistics count under.
    response_index: AtomicU64,
}

enum Sink {
    Collect {
        slot: Mutex<Option<Result<Vec<OutputTensor>>>>,
        done: Condvar,
        /// Whether the caller still waits, where the scheduler watches it.
        caller: Option<CallerPresence>,
    },
    /// Empty once handed back after a reschedule.
    Stream(Mutex<Option<ResponseSender>>),
}

impl Exchange {
    /// For a request of a non-decoupled model: one response, awaited with [`Self::wait`];
    /// `caller` tells [`Self::is_cancelled`] whether its caller left.
    pub fn collecting(origin: String, caller: Option<CallerPresence>) -> Self {
        Self::new(
            Sink::Collect {
                slot: Mutex::new(None),
                done: Condvar::new(),
                caller,
            },
            origin,
        )
    }

    /// For a request of a decoupled model: every response goes to `sender`.
    pub fn streaming(sender: ResponseSender, origin: String) -> Self {
        Self::new(Sink::Stream(Mutex::new(Some(sender))), origin)
    }

    fn new(sink: Sink, origin: String) -> Self {
        Self {
            sink,
            live: AtomicUsize::new(0),
            finished: AtomicBool::new(false),
            rescheduled: AtomicBool::new(false),
            origin,
            states: Mutex::new(Vec::new()),
            shared: Vec::new(),
            parameters: Mutex::new(Vec::new()),
            response_index: AtomicU64::new(0),
        }
    }

    /// The request's single-buffer states (see `single_buffer`).
    pub(crate) fn with_shared_states(mut self, shared: Vec<Arc<SharedState>>) -> Self {
        self.shared = shared;
        self
    }

    /// The single-buffer state the backend names `name` (its output name), if any.
    pub(crate) fn shared_state(&self, name: &str) -> Option<&Arc<SharedState>> {
        self.shared.iter().find(|s| s.output_name == name)
    }

    /// The single-buffer state fed to input `name`, if any.
    pub(crate) fn shared_input(&self, name: &str) -> Option<&Arc<SharedState>> {
        self.shared.iter().find(|s| s.input_name == name)
    }

    /// The request's single-buffer states.
    pub(crate) fn shared_states(&self) -> &[Arc<SharedState>] {
        &self.shared
    }

    /// The index of this request's next reported response (0, 1, ...), as Triton's
    /// response factory numbers them for `response_stats`.
    pub fn next_response_index(&self) -> u64 {
        self.response_index.fetch_add(1, Ordering::Relaxed)
    }

    /// Keeps a sequence state for the response, where the sequence batcher takes it.
    pub fn add_state(&self, state: OutputTensor) {
        self.states.lock().push(state);
    }

    /// A backend object of this request was created.
    pub fn acquire(&self) {
        self.live.fetch_add(1, Ordering::AcqRel);
    }

    /// A backend object of this request was released or deleted.
    pub fn release(&self) {
        if self.live.fetch_sub(1, Ordering::AcqRel) == 1
            && !self.is_finished()
            && !self.is_rescheduled()
        {
            self.deliver(
                Some(Err(Error::internal(format!(
                    "{} released a request without sending its final response",
                    self.origin
                )))),
                true,
            );
        }
    }

    /// Whether the final flag was sent.
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Whether the caller stopped listening.
    pub fn is_cancelled(&self) -> bool {
        match &self.sink {
            Sink::Collect { caller, .. } => caller.as_ref().is_some_and(CallerPresence::left),
            Sink::Stream(sender) => sender.lock().as_ref().is_none_or(|s| s.is_cancelled()),
        }
    }

    /// The backend released the request to run again
    /// (`TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`): it gets no answer from this
    /// execution, and an instance thread waiting for one stops waiting.
    pub fn reschedule(&self) {
        self.rescheduled.store(true, Ordering::Release);
        if let Sink::Collect { slot, done, .. } = &self.sink {
            let _guard = slot.lock();
            done.notify_all();
        }
    }

    /// Whether the backend rescheduled the request.
    pub fn is_rescheduled(&self) -> bool {
        self.rescheduled.load(Ordering::Acquire)
    }

    /// A rescheduled decoupled request's stream, for its next execution; responses sent
    /// here afterwards are dropped.
    pub fn take_stream(&self) -> Option<ResponseSender> {
        match &self.sink {
            Sink::Collect { .. } => None,
            Sink::Stream(sender) => sender.lock().take(),
        }
    }

    /// Delivers a response (`Some`) or a final flag alone (`None` with `last`). Returns
    /// false when the request already ended.
    pub fn deliver(&self, result: Option<Result<Vec<OutputTensor>>>, last: bool) -> bool {
        self.deliver_with_parameters(result, Vec::new(), last)
    }

    /// A collecting request's response parameters, once it was answered.
    pub fn take_parameters(&self) -> Parameters {
        std::mem::take(&mut self.parameters.lock())
    }

    /// [`Self::deliver`] with the parameters the backend set on the response.
    pub fn deliver_with_parameters(
        &self,
        result: Option<Result<Vec<OutputTensor>>>,
        parameters: Parameters,
        last: bool,
    ) -> bool {
        if self.is_finished() {
            return false;
        }
        let result = result.map(|r| {
            r.map(|mut outputs| {
                outputs.append(&mut self.states.lock());
                outputs.extend(self.shared.iter().filter_map(|s| s.take_value()));
                outputs
            })
        });
        match &self.sink {
            Sink::Stream(sender) => {
                let sender = sender.lock();
                let Some(sender) = sender.as_ref() else {
                    return false;
                };
                match result {
                    Some(result) => {
                        sender.send_with_parameters(result, parameters, last);
                    }
                    None if last => {
                        sender.close();
                    }
                    None => {}
                }
                if last {
                    self.finished.store(true, Ordering::Release);
                }
            }
            Sink::Collect { slot, done, .. } => {
                let mut slot = slot.lock();
                match (result, slot.is_some()) {
                    (Some(result), false) => {
                        *slot = Some(result);
                        *self.parameters.lock() = parameters;
                    }
                    (Some(_), true) => tracing::warn!(
                        "{} sent more than one response to a request of a non-decoupled model; the later ones are dropped",
                        self.origin
                    ),
                    (None, _) => {}
                }
                if last {
                    if slot.is_none() {
                        *slot = Some(Err(Error::internal(format!(
                            "{} completed a request without sending a response",
                            self.origin
                        ))));
                    }
                    self.finished.store(true, Ordering::Release);
                    done.notify_all();
                }
            }
        }
        true
    }

    /// Waits for the final flag of a collecting request and takes its response.
    pub fn wait(&self) -> Result<Vec<OutputTensor>> {
        match &self.sink {
            Sink::Stream(_) => Err(Error::internal(
                "a decoupled request has no single response",
            )),
            Sink::Collect { slot, done, .. } => {
                let mut slot = slot.lock();
                while !self.is_finished() {
                    if self.is_rescheduled() {
                        return Err(Error::internal(format!(
                            "{} rescheduled the request",
                            self.origin
                        )));
                    }
                    done.wait(&mut slot);
                }
                slot.take().unwrap_or_else(|| {
                    Err(Error::internal(format!(
                        "{}: response already taken",
                        self.origin
                    )))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn tensor(name: &str) -> OutputTensor {
        OutputTensor {
            name: name.into(),
            datatype: nereid_core::DataType::Int32,
            shape: vec![1],
            data: bytes::Bytes::from_static(&[1, 0, 0, 0]),
            device: None,
        }
    }

    #[test]
    fn a_collecting_request_waits_for_the_final_flag_and_keeps_the_first_response() {
        let exchange = Arc::new(Exchange::collecting("model 'm' (backend 'b')".into(), None));
        exchange.acquire();
        let sender = exchange.clone();
        let thread = std::thread::spawn(move || {
            sender.deliver(Some(Ok(vec![tensor("OUT")])), false);
            sender.deliver(Some(Ok(vec![tensor("LATER")])), false);
            sender.add_state(tensor("STATE"));
            sender.deliver(None, true);
        });
        let outputs = exchange.wait().expect("a response");
        thread.join().expect("sender thread");
        let names: Vec<_> = outputs.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["OUT"]);
        assert!(!exchange.deliver(Some(Ok(vec![])), true), "ended");
    }

    #[test]
    fn releasing_every_object_without_a_final_flag_answers_with_an_error() {
        let exchange = Exchange::collecting("model 'm' (backend 'b')".into(), None);
        exchange.acquire();
        exchange.acquire();
        exchange.release();
        assert!(!exchange.is_finished(), "a factory is still alive");
        exchange.release();
        let error = exchange.wait().expect_err("no response");
        assert_eq!(
            error.message(),
            "model 'm' (backend 'b') released a request without sending its final response"
        );
    }

    #[test]
    fn a_final_flag_without_a_response_is_an_error_for_a_non_decoupled_model() {
        let exchange = Exchange::collecting("model 'm' (backend 'b')".into(), None);
        exchange.deliver(None, true);
        let error = exchange.wait().expect_err("no response");
        assert!(
            error.message().contains("without sending a response"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_streaming_request_forwards_each_response_and_ends_at_the_final_flag() {
        let shape: nereid_core::response_stream::ShapeResponse = Box::new(|outputs| {
            Ok(nereid_core::request::InferResponse {
                model_name: "m".into(),
                model_version: 1,
                id: String::new(),
                parameters: vec![],
                outputs: outputs.into(),
            })
        });
        let (sender, mut stream) = ResponseSender::channel(shape);
        let exchange = Exchange::streaming(sender, "model 'm' (backend 'b')".into());
        exchange.deliver(Some(Ok(vec![tensor("A")])), false);
        exchange.deliver(Some(Err(Error::internal("boom"))), false);
        exchange.deliver(None, true);
        let first = stream.recv().await.expect("first");
        assert!(!first.last);
        assert_eq!(
            first.result.expect("some").expect("ok").outputs[0].name,
            "A"
        );
        let second = stream.recv().await.expect("second");
        assert_eq!(
            second.result.expect("some").expect_err("error").message(),
            "boom"
        );
        let last = stream.recv().await.expect("final");
        assert!(last.last && last.result.is_none());
        assert!(!exchange.deliver(None, true));
    }
}
