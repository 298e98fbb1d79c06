//! What the backend objects of one request share: where its responses go and how many of
//! its objects (request, factories, responses) are still alive. A non-decoupled request
//! collects its one response for the instance thread waiting on it; a decoupled one
//! forwards each response to its stream. When the last object is gone without a final
//! flag, the request is answered with an error naming the backend, so a backend that
//! forgets a request never leaves its caller waiting.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use nereid_core::request::OutputTensor;
use nereid_core::response_stream::ResponseSender;
use nereid_core::{Error, Result};
use parking_lot::{Condvar, Mutex};

/// A request's response channel and live-object count.
pub struct Exchange {
    sink: Sink,
    live: AtomicUsize,
    finished: AtomicBool,
    /// "model 'm' (backend 'b')", for errors.
    origin: String,
    /// Sequence state tensors (`TRITONBACKEND_StateUpdate`), added to the next response.
    states: Mutex<Vec<OutputTensor>>,
}

enum Sink {
    Collect {
        slot: Mutex<Option<Result<Vec<OutputTensor>>>>,
        done: Condvar,
    },
    Stream(ResponseSender),
}

impl Exchange {
    /// For a request of a non-decoupled model: one response, awaited with [`Self::wait`].
    pub fn collecting(origin: String) -> Self {
        Self::new(
            Sink::Collect {
                slot: Mutex::new(None),
                done: Condvar::new(),
            },
            origin,
        )
    }

    /// For a request of a decoupled model: every response goes to `sender`.
    pub fn streaming(sender: ResponseSender, origin: String) -> Self {
        Self::new(Sink::Stream(sender), origin)
    }

    fn new(sink: Sink, origin: String) -> Self {
        Self {
            sink,
            live: AtomicUsize::new(0),
            finished: AtomicBool::new(false),
            origin,
            states: Mutex::new(Vec::new()),
        }
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
        if self.live.fetch_sub(1, Ordering::AcqRel) == 1 && !self.is_finished() {
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
            Sink::Collect { .. } => false,
            Sink::Stream(sender) => sender.is_cancelled(),
        }
    }

    /// Delivers a response (`Some`) or a final flag alone (`None` with `last`). Returns
    /// false when the request already ended.
    pub fn deliver(&self, result: Option<Result<Vec<OutputTensor>>>, last: bool) -> bool {
        if self.is_finished() {
            return false;
        }
        let result = result.map(|r| {
            r.map(|mut outputs| {
                outputs.append(&mut self.states.lock());
                outputs
            })
        });
        match &self.sink {
            Sink::Stream(sender) => {
                match result {
                    Some(result) => {
                        sender.send(result, last);
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
            Sink::Collect { slot, done } => {
                let mut slot = slot.lock();
                match (result, slot.is_some()) {
                    (Some(result), false) => *slot = Some(result),
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
            Sink::Collect { slot, done } => {
                let mut slot = slot.lock();
                while !self.is_finished() {
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
