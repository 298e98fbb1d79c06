//! What a sampled request's trace records where the loaded model handles it: the queue
//! entry and, at the `TENSORS` level, its inputs.

use std::time::Instant;

use crate::request::InferRequest;
use crate::trace::{RequestTrace, TensorActivity};

/// A queued request's `QUEUE_START` and, at the `TENSORS` level, its inputs.
pub(super) fn trace_queued(trace: &RequestTrace, request: &InferRequest, at: Instant) {
    trace.timestamp("QUEUE_START", at);
    if trace.traces_tensors() {
        for input in &request.inputs {
            let activity = TensorActivity::QueueInput;
            trace.tensor(
                activity,
                &input.name,
                input.datatype,
                &input.shape,
                &input.data,
            );
        }
    }
}
