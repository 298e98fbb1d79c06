//! What a sampled request's trace records where the loaded model handles it: the queue
//! entry and, at the `TENSORS` level, its inputs.

use std::time::Instant;

use crate::request::{trace_inputs, InferRequest};
use crate::trace::{RequestTrace, TensorActivity};

/// A queued request's `QUEUE_START` and, at the `TENSORS` level, its inputs.
pub(super) fn trace_queued(trace: &RequestTrace, request: &InferRequest, at: Instant) {
    trace.timestamp("QUEUE_START", at);
    trace_inputs(trace, TensorActivity::QueueInput, &request.inputs);
}
