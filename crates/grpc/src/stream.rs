//! `ModelStreamInfer`: a bidirectional stream of requests and responses. Requests are
//! admitted in stream order (so a sequence's requests reach the sequence batcher in the
//! order they were sent) and run concurrently, each awaited by its own task; responses
//! are written in the order the requests arrived, as Triton does for non-decoupled
//! models, so a cache hit never overtakes an earlier miss; a decoupled model's answers
//! are written as they come. Every response says with `triton_final_response` whether it
//! is its request's last. A failed request is answered in-stream with `error_message`
//! and the stream stays open, unless the client opened the stream with the header
//! `triton_grpc_error: true`: then the first request that fails after it was issued (its
//! model's error, a timeout, a cancellation) ends the stream with that error's gRPC
//! status, and the requests still in flight are cancelled, as in Triton's
//! `ModelStreamInferHandler`. A request refused before it was issued (an unknown model,
//! inputs that do not match the model) is still answered in-stream, as there.
//!
//! Backpressure has two stages. Requests are read from the connection as soon as they
//! arrive, into a read-ahead queue bounded in bytes ([`READ_AHEAD_BYTES`]): the HTTP/2
//! layer treats many small DATA frames left unread as an attack and closes the whole
//! connection, so a client streaming small requests faster than they are answered must
//! not be left unread inside it. From that queue a request is admitted only once a slot
//! in the bounded outgoing channel is reserved for its answer, so requests in flight plus
//! answers not yet sent never exceed [`STREAM_CAPACITY`]; a client that stops reading
//! answers stops being read from once its read-ahead is full. A decoupled model's
//! answers also hold a share of [`DECOUPLED_OUTGOING_BYTES`] until tonic takes them, so a
//! model sending large responses to a client that stops reading is held back after a
//! bounded number of bytes, not after [`STREAM_CAPACITY`] responses of any size.
//!
//! Each request is sampled for tracing once decoded, as Triton's `ModelStreamInferHandler`
//! does: `GRPC_WAITREAD_START` when the stream began waiting for it, `GRPC_WAITREAD_END`
//! when it was read, the core's records, `INFER_RESPONSE_COMPLETE` when its first answer
//! (or final flag) comes, and `GRPC_SEND_START` / `GRPC_SEND_END` around each message
//! written for it (server `src/grpc/stream_infer_handler.cc`, `infer_handler.h`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use nereid_core::request::Parameters;
use nereid_core::trace::{stamp, RequestTrace};
use nereid_core::Server;
use nereid_proto::inference::{ModelInferRequest, ModelInferResponse, ModelStreamInferResponse};
use prost::Message;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::convert;

/// Most requests in flight plus responses waiting to be sent, per stream.
pub const STREAM_CAPACITY: usize = 256;

/// Most bytes of requests read from a stream but not yet admitted.
pub const READ_AHEAD_BYTES: usize = 16 << 20;

/// Most bytes of decoupled models' answers waiting to be sent, per stream.
pub const DECOUPLED_OUTGOING_BYTES: usize = 16 << 20;

/// One message for the client, with the share of [`DECOUPLED_OUTGOING_BYTES`] it holds
/// until it is taken for sending.
type OutgoingMessage = (Written, Option<OwnedSemaphorePermit>);

/// What is written for one answer: a stream message, or the status the stream ends with.
type Written = Result<ModelStreamInferResponse, Status>;

type Outgoing = mpsc::Sender<OutgoingMessage>;

/// The outgoing half of a `ModelStreamInfer` call: each message given up to tonic
/// releases the bytes it held. A stream the server stopped reading because it is
/// shutting down ends, after the answers of every request it had read, with
/// [`shutdown_status`]: the client's requests sent after that point were never read, and a
/// stream ending with OK would leave a client waiting for their answers forever.
pub struct ResponseStream {
    messages: ReceiverStream<OutgoingMessage>,
    cut_short: Arc<AtomicBool>,
}

impl futures::Stream for ResponseStream {
    type Item = Result<ModelStreamInferResponse, Status>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        Pin::new(&mut self.messages).poll_next(cx).map(|next| {
            match next {
                Some((message, _held)) => Some(message),
                // Taken once: the stream ends after the status.
                None => self
                    .cut_short
                    .swap(false, Ordering::Relaxed)
                    .then(|| Err(shutdown_status())),
            }
        })
    }
}

/// The status of a stream cut short by shutdown (UNAVAILABLE: another server, or this
/// one restarted, can take the requests not read).
fn shutdown_status() -> Status {
    Status::unavailable("server is shutting down: requests sent after shutdown began were not read")
}

/// A request read ahead, holding its share of [`READ_AHEAD_BYTES`] until admitted, with
/// when the stream began waiting for it and when it was read (only while tracing is on).
type ReadAhead = (ModelInferRequest, OwnedSemaphorePermit, Option<WaitRead>);

/// When the stream began waiting for a request and when it had read it.
#[derive(Debug, Clone, Copy)]
struct WaitRead {
    start: Instant,
    end: Instant,
}

/// What a stream's metadata gives each of its requests.
pub struct StreamMetadata {
    /// The parameters forwarded from the metadata (or the error each request fails with).
    pub forwarded: nereid_core::Result<Parameters>,
    /// The W3C trace-context entries (`traceparent`, `tracestate`) present.
    pub trace_context: Vec<(&'static str, String)>,
    /// Whether a request failing after it was issued ends the stream with its status
    /// (the `triton_grpc_error: true` header) rather than an in-stream `error_message`.
    pub ends_on_error: bool,
}

impl StreamMetadata {
    /// Reads the trace context from `metadata` beside the `forwarded` parameters.
    pub fn new(
        metadata: &tonic::metadata::MetadataMap,
        forwarded: nereid_core::Result<Parameters>,
    ) -> Self {
        let trace_context = ["traceparent", "tracestate"]
            .into_iter()
            .filter_map(|name| Some((name, crate::trace::metadata_text(metadata, name)?)))
            .collect();
        let ends_on_error =
            crate::trace::metadata_text(metadata, "triton_grpc_error").as_deref() == Some("true");
        Self {
            forwarded,
            trace_context,
            ends_on_error,
        }
    }
}

/// An admitted request: its slot in the outgoing channel, the task computing its answer
/// and its trace, if sampled.
type Answer = (
    mpsc::OwnedPermit<OutgoingMessage>,
    AbortOnDrop<Written>,
    Option<RequestTrace>,
);

/// The task answering one request of the stream; dropping it (the client went away)
/// aborts the task, which drops the request's inference and so cancels it if it has not
/// started executing.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts answering `inbound`; the returned stream ends once the client has closed its
/// side (or the server begins shutting down) and every request read has been answered.
/// `metadata` is what the stream's metadata gives each of its requests; at most
/// `response_pool_size` responses of a decoupled request wait to be written before its
/// backend waits (Triton's per-request response queue).
pub fn start(
    server: Arc<Server>,
    inbound: Streaming<ModelInferRequest>,
    metadata: StreamMetadata,
    response_pool_size: usize,
) -> ResponseStream {
    let (outgoing, receiver) = mpsc::channel(STREAM_CAPACITY);
    // Both queues are bounded by what their items hold: read-ahead bytes, outgoing slots.
    let (read_ahead, to_admit) = mpsc::unbounded_channel();
    let (answers, in_order) = mpsc::unbounded_channel();
    let cut_short = Arc::new(AtomicBool::new(false));
    tokio::spawn(read_requests(
        Arc::clone(&server),
        inbound,
        outgoing.clone(),
        read_ahead,
        Arc::clone(&cut_short),
    ));
    tokio::spawn(write_in_order(in_order, outgoing.clone()));
    let admission = Admitting {
        server,
        metadata,
        response_pool_size,
    };
    tokio::spawn(admit_in_order(admission, to_admit, outgoing, answers));
    ResponseStream {
        messages: ReceiverStream::new(receiver),
        cut_short,
    }
}

/// Owns the inbound half: reads until the client closes it, fails, or stops listening,
/// or the server begins shutting down (then sets `cut_short`).
async fn read_requests(
    server: Arc<Server>,
    mut inbound: Streaming<ModelInferRequest>,
    outgoing: Outgoing,
    read_ahead: mpsc::UnboundedSender<ReadAhead>,
    cut_short: Arc<AtomicBool>,
) {
    let budget = Arc::new(Semaphore::new(READ_AHEAD_BYTES));
    loop {
        // Stamped only while tracing is on: one atomic check otherwise.
        let wait_start = server.trace().is_active().then(Instant::now);
        // At shutdown the stream takes no new requests; those read are still answered,
        // then the response stream ends with the shutdown status.
        let next = tokio::select! {
            next = inbound.message() => next,
            () = outgoing.closed() => return,
            () = server.stopped() => {
                cut_short.store(true, Ordering::Relaxed);
                return;
            }
        };
        let request = match next {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(status) => {
                tracing::debug!(error = %status, "stream inference: inbound stream ended");
                return;
            }
        };
        // A request larger than the whole budget waits for all of it.
        let share = request.encoded_len().clamp(1, READ_AHEAD_BYTES) as u32;
        let wait = wait_start.map(|start| WaitRead {
            start,
            end: Instant::now(),
        });
        let Ok(held) = Arc::clone(&budget).acquire_many_owned(share).await else {
            return; // never closed
        };
        if read_ahead.send((request, held, wait)).is_err() {
            return; // the client dropped the response stream
        }
    }
}

/// Admits read-ahead requests in stream order, each once its answer has a slot, and
/// queues their answers in the same order. A decoupled model's answers skip the order:
/// they are forwarded as the model sends them, as in Triton.
async fn admit_in_order(
    admitting: Admitting,
    mut to_admit: mpsc::UnboundedReceiver<ReadAhead>,
    outgoing: Outgoing,
    answers: mpsc::UnboundedSender<Answer>,
) {
    // Shared by the stream's decoupled requests.
    let decoupled_bytes = Arc::new(Semaphore::new(DECOUPLED_OUTGOING_BYTES));
    while let Some((request, held, wait)) = to_admit.recv().await {
        let Ok(slot) = outgoing.clone().reserve_owned().await else {
            return; // the client dropped the response stream
        };
        let admission = submit(&admitting, request, wait);
        drop(held);
        match admission {
            Admission::Ordered(answer, trace) => {
                let task = AbortOnDrop(tokio::spawn(answer));
                if answers.send((slot, task, trace)).is_err() {
                    return; // the writer stopped after a failed answer
                }
            }
            Admission::Streamed(forward) => {
                drop(slot);
                tokio::spawn(forward.run(outgoing.clone(), decoupled_bytes.clone()));
            }
            Admission::Now(message) => {
                slot.send((Ok(message), None));
            }
        }
    }
}

/// Sends each answer once it and every answer before it are ready. When the client goes
/// away, or an answer ends the stream with its status, the requests still waiting are
/// dropped (their tasks aborted), so the ones not yet executing are cancelled.
async fn write_in_order(mut in_order: mpsc::UnboundedReceiver<Answer>, client: Outgoing) {
    while let Some((slot, answer, trace)) = in_order.recv().await {
        let answer = tokio::select! {
            answer = answer => answer,
            () = client.closed() => return,
        };
        match answer {
            Ok(Ok(message)) => {
                // tonic writes the message after this hand-over, as for `ModelInfer`.
                stamp(trace.as_ref(), "GRPC_SEND_START");
                slot.send((Ok(message), None));
                stamp(trace.as_ref(), "GRPC_SEND_END");
            }
            Ok(Err(status)) => {
                slot.send((Err(status), None));
                return;
            }
            // The answering task panicked: the stream cannot keep its order promise.
            Err(e) => {
                tracing::error!(error = %e, "stream inference: answering a request failed");
                slot.send((
                    Err(Status::internal("failed to answer a stream request")),
                    None,
                ));
                return;
            }
        }
    }
}

/// What admitting a stream's requests takes: the server, what the stream's metadata
/// gives each request, and how many responses of a decoupled request may wait.
struct Admitting {
    server: Arc<Server>,
    metadata: StreamMetadata,
    response_pool_size: usize,
}

/// How one admitted request is answered.
enum Admission {
    /// One answer, written in stream order, and the request's trace.
    Ordered(
        Pin<Box<dyn Future<Output = Written> + Send>>,
        Option<RequestTrace>,
    ),
    /// A decoupled model's answers, forwarded as they come.
    Streamed(Box<Forward>),
    /// A decoupled model's request refused before it was issued: written at once.
    Now(ModelStreamInferResponse),
}

/// Admits one request now: the future of its stream message (the response, or the error
/// with the request's identity), or, for a decoupled model, the stream of its answers.
/// An error before the request is issued (its version, model, inputs) carries only the
/// request's id, as in Triton; a response that completes its request is marked
/// `triton_final_response`. A request whose read was timed (`wait`) may be sampled for
/// tracing once it is decoded, where Triton samples it.
fn submit(admitting: &Admitting, request: ModelInferRequest, wait: Option<WaitRead>) -> Admission {
    let Admitting {
        server,
        metadata,
        response_pool_size,
    } = admitting;
    let echo = ModelInferResponse {
        model_name: request.model_name.clone(),
        model_version: request.model_version.clone(),
        id: request.id.clone(),
        ..Default::default()
    };
    let empty_final = convert::wants_empty_final(&request);
    // The model is looked up before the inputs are read, as Triton learns its
    // transaction policy.
    let decoupled = match convert::parse_version(&request.model_version)
        .and_then(|version| server.model_spec(&request.model_name, version))
    {
        Ok(spec) => spec.decoupled,
        Err(e) => return refused_in_order(e, echo.id),
    };
    let decoded =
        convert::decode_request(request, server.shm()).and_then(|(mut request, targets)| {
            request.parameters.extend(metadata.forwarded.clone()?);
            request.trace =
                wait.and_then(|wait| sample(server, metadata, &request.model_name, wait));
            Ok((request, targets))
        });
    if decoupled {
        let admitted = decoded.and_then(|(request, targets)| {
            let trace = request.trace.clone();
            Ok(Box::new(Forward {
                answers: server.submit_stream_holding(request, *response_pool_size)?,
                echo: echo.clone(),
                targets,
                empty_final,
                ends_on_error: metadata.ends_on_error,
                trace,
            }))
        });
        return match admitted {
            Ok(forward) => Admission::Streamed(forward),
            Err(e) => Admission::Now(refused(e, echo.id)),
        };
    }
    let (admitted, targets, trace) = match decoded {
        Ok((request, targets)) => {
            let trace = request.trace.clone();
            (server.admit(request), targets, trace)
        }
        Err(e) => return refused_in_order(e, echo.id),
    };
    // Where errors end the stream, a refusal before issue (an unknown model, validation,
    // a full queue) is still answered in-stream, as Triton answers it; only an issued
    // request's failure ends the stream, however soon it comes.
    let (answer, ends_on_error) = match admitted {
        Ok(answer) => (answer, metadata.ends_on_error),
        Err(e) => {
            nereid_core::request::log_refused(&echo.id, &e);
            (nereid_core::request::refused(e), false)
        }
    };
    let completed = trace.clone();
    let answering = Box::pin(async move {
        let result = answer.await;
        stamp(completed.as_ref(), "INFER_RESPONSE_COMPLETE");
        let result = result.and_then(|response| convert::encode_response(response, &targets));
        let mut written = answered(result, echo, ends_on_error);
        if let Ok(message) = &mut written {
            if message.error_message.is_empty() {
                if let Some(response) = message.infer_response.as_mut() {
                    convert::mark_final(response, true);
                }
            }
        }
        written
    });
    Admission::Ordered(answering, trace)
}

/// Samples a decoded request for tracing (continuing the stream's trace context in the
/// opentelemetry mode) and records how its read went.
fn sample(
    server: &Server,
    metadata: &StreamMetadata,
    model: &str,
    wait: WaitRead,
) -> Option<RequestTrace> {
    let header = |name: &str| {
        metadata
            .trace_context
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.clone())
    };
    let trace = server.trace().sample_propagated(model, &header)?;
    trace.timestamp("GRPC_WAITREAD_START", wait.start);
    trace.timestamp("GRPC_WAITREAD_END", wait.end);
    Some(trace)
}

/// [`refused`], written in stream order.
fn refused_in_order(error: nereid_core::Error, id: String) -> Admission {
    Admission::Ordered(Box::pin(std::future::ready(Ok(refused(error, id)))), None)
}

/// The stream message for a request refused before it was issued: the error and the
/// request's id alone.
fn refused(error: nereid_core::Error, id: String) -> ModelStreamInferResponse {
    ModelStreamInferResponse {
        error_message: error.message().to_string(),
        infer_response: Some(ModelInferResponse {
            id,
            ..Default::default()
        }),
    }
}

/// The answers of one request to a decoupled model, on their way to the stream.
struct Forward {
    answers: nereid_core::response_stream::ResponseStream,
    echo: ModelInferResponse,
    targets: convert::OutputTargets,
    /// Whether a final flag sent alone becomes an empty response.
    empty_final: bool,
    /// Whether a failed answer ends the stream with its status.
    ends_on_error: bool,
    /// The request's trace, if sampled; dropped (and so written) once the stream ends.
    trace: Option<RequestTrace>,
}

impl Forward {
    /// Writes each answer as it comes, marked with `triton_final_response`; a final
    /// flag alone is written only when the request asked for it, as in Triton.
    async fn run(mut self, outgoing: Outgoing, budget: Arc<Semaphore>) {
        let mut first = true;
        loop {
            // A client that goes away while the model is still working (a cancelled or
            // reset stream) drops the answers now, which the backend sees as its request
            // cancelled, not only when the next answer finds nobody to write to.
            let answer = tokio::select! {
                answer = self.answers.recv() => answer,
                () = outgoing.closed() => return,
            };
            let Some(answer) = answer else {
                return;
            };
            // Triton stamps the first callback only, a response or a final flag alone.
            if std::mem::take(&mut first) {
                stamp(self.trace.as_ref(), "INFER_RESPONSE_COMPLETE");
            }
            let mut written = match answer.result {
                Some(result) => match answered(
                    result.and_then(|r| convert::encode_response(r, &self.targets)),
                    self.echo.clone(),
                    self.ends_on_error,
                ) {
                    Ok(message) => message,
                    Err(status) => {
                        // The stream ends here; dropping the answers cancels the request.
                        let _ = outgoing.send((Err(status), None)).await;
                        return;
                    }
                },
                None if answer.last && self.empty_final => ModelStreamInferResponse {
                    error_message: String::new(),
                    infer_response: Some(self.echo.clone()),
                },
                None => {
                    if answer.last {
                        return;
                    }
                    continue;
                }
            };
            if let Some(response) = written.infer_response.as_mut() {
                convert::mark_final(response, answer.last);
            }
            // A message larger than the whole budget waits for all of it.
            let share = written.encoded_len().clamp(1, DECOUPLED_OUTGOING_BYTES) as u32;
            let Ok(held) = Arc::clone(&budget).acquire_many_owned(share).await else {
                return; // never closed
            };
            stamp(self.trace.as_ref(), "GRPC_SEND_START");
            let sent = outgoing.send((Ok(written), Some(held))).await;
            stamp(self.trace.as_ref(), "GRPC_SEND_END");
            if sent.is_err() || answer.last {
                return; // done, or the client is gone (dropping the answers cancels)
            }
        }
    }
}

/// What is written for one request's result: its stream message, or, where errors end
/// the stream (`ends_on_error`), a failure's status.
fn answered(
    result: nereid_core::Result<ModelInferResponse>,
    echo: ModelInferResponse,
    ends_on_error: bool,
) -> Written {
    match result {
        Err(e) if ends_on_error => Err(crate::status::to_status(e)),
        result => Ok(message(result, echo)),
    }
}

/// The stream message for one request's result.
fn message(
    result: nereid_core::Result<ModelInferResponse>,
    echo: ModelInferResponse,
) -> ModelStreamInferResponse {
    match result {
        Ok(response) => ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(response),
        },
        Err(e) => ModelStreamInferResponse {
            error_message: e.message().to_string(),
            infer_response: Some(echo),
        },
    }
}
