//! `ModelStreamInfer`: a bidirectional stream of requests and responses. Requests are
//! admitted in stream order (so a sequence's requests reach the sequence batcher in the
//! order they were sent), then each is awaited by its own task, so responses of different
//! requests may come back in a different order; a failed request is answered in-stream
//! with `error_message` and the stream stays open.
//!
//! Backpressure: a slot in the bounded outgoing channel is reserved *before* the next
//! request is read, so requests in flight plus responses not yet sent never exceed
//! [`STREAM_CAPACITY`]; a client that stops reading responses stops being read from.

use std::sync::Arc;

use nereid_core::Server;
use nereid_proto::inference::{ModelInferRequest, ModelInferResponse, ModelStreamInferResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::convert;

/// Most requests in flight plus responses waiting to be sent, per stream.
pub const STREAM_CAPACITY: usize = 256;

/// The outgoing half of a `ModelStreamInfer` call.
pub type ResponseStream = ReceiverStream<Result<ModelStreamInferResponse, Status>>;

type Outgoing = mpsc::Sender<Result<ModelStreamInferResponse, Status>>;

/// Starts answering `inbound`; the returned stream ends once the client has closed its
/// side (or the server begins shutting down) and every request read has been answered.
pub fn start(server: Arc<Server>, inbound: Streaming<ModelInferRequest>) -> ResponseStream {
    let (outgoing, receiver) = mpsc::channel(STREAM_CAPACITY);
    tokio::spawn(read_requests(server, inbound, outgoing));
    ReceiverStream::new(receiver)
}

/// Owns the inbound half: reads until the client closes it, fails, or stops listening.
async fn read_requests(
    server: Arc<Server>,
    mut inbound: Streaming<ModelInferRequest>,
    outgoing: Outgoing,
) {
    loop {
        let Ok(permit) = outgoing.clone().reserve_owned().await else {
            return; // the client dropped the response stream
        };
        // At shutdown the stream takes no new requests; those in flight are still
        // answered, then the response stream ends.
        let next = tokio::select! {
            next = inbound.message() => next,
            () = outgoing.closed() => return,
            () = server.stopped() => return,
        };
        match next {
            Ok(Some(request)) => {
                let pending = submit(&server, request);
                tokio::spawn(async move {
                    permit.send(Ok(pending.await));
                });
            }
            Ok(None) => return,
            Err(status) => {
                tracing::debug!(error = %status, "stream inference: inbound stream ended");
                return;
            }
        }
    }
}

/// Admits one request now and returns the future of its stream message: the response,
/// or the error with the request's identity.
fn submit(
    server: &Server,
    request: ModelInferRequest,
) -> impl std::future::Future<Output = ModelStreamInferResponse> + Send + 'static {
    let echo = ModelInferResponse {
        model_name: request.model_name.clone(),
        model_version: request.model_version.clone(),
        id: request.id.clone(),
        ..Default::default()
    };
    let admitted = convert::decode_request(request, server.shm())
        .map(|(request, targets)| (server.submit(request), targets));
    async move {
        let result = match admitted {
            Ok((answer, targets)) => answer
                .await
                .and_then(|response| convert::encode_response(response, &targets)),
            Err(e) => Err(e),
        };
        message(result, echo)
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
