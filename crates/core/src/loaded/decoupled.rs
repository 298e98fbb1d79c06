//! Requests of decoupled models: any number of responses per request, each shaped,
//! selected and traced as it is sent, the last one marked final.

use std::sync::Arc;
use std::time::Instant;

use super::{Admitted, LoadedModel, Runner};
use crate::error::Result;
use crate::request::{select_outputs, trace_outputs, InferRequest, InferResponse};
use crate::response_stream::{ResponseSender, ResponseStream};
use crate::stats::FirstResponse;
use crate::validate::validate_request;

impl LoadedModel {
    /// Admits one request of a decoupled model now and returns the stream of its
    /// answers: any number of responses, the last one (or a final flag alone) marked;
    /// at most `waiting` of them wait for the caller before the backend sending waits.
    pub fn submit_stream(
        self: Arc<Self>,
        mut request: InferRequest,
        received_at: Instant,
        waiting: usize,
    ) -> Result<ResponseStream> {
        self.place_tensors(&mut request)?;
        let batch_size = validate_request(&self.spec, &request)?;
        let spec = self.spec.clone();
        let id = request.id.clone();
        let wanted = request.requested_outputs.clone();
        let trace = request.trace.clone();
        if let Some(trace) = &trace {
            trace.request_start(&spec.name, spec.version, &id, received_at);
        }
        let (sender, stream) = ResponseSender::holding(
            waiting,
            Box::new(move |outputs| {
                // Each response records its outputs as it is sent (core `InferenceResponse::Send`).
                if let Some(trace) = &trace {
                    trace_outputs(trace, &outputs);
                }
                let mut outputs = select_outputs(outputs, wanted.as_deref());
                spec.reshape_outputs(&mut outputs)?;
                Ok(InferResponse {
                    model_name: spec.name.clone(),
                    model_version: spec.version,
                    id: id.clone(),
                    parameters: Vec::new(),
                    outputs,
                })
            }),
        );
        let sender = sender.observing(FirstResponse::of(&self.stats, received_at));
        let admitted = Admitted {
            batch_size,
            received_at,
            step_times: None,
            queue_traced: false,
        };
        match self.runner.as_ref() {
            Runner::Scheduled(scheduler) => {
                self.enqueue(scheduler.as_ref(), request, admitted, Some(sender), None)?;
            }
            Runner::Ensemble(ensemble) => {
                self.stream_ensemble(ensemble, request, admitted, sender);
            }
        }
        Ok(stream)
    }
}
