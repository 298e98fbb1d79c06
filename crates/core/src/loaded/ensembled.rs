//! Running a request of an ensemble version: its steps submitted as a data-flow graph,
//! recorded as one execution whose queue and compute times are the steps' sums. An
//! ensemble with a decoupled step streams its responses instead.

use std::sync::Arc;
use std::time::Instant;

use super::traced::trace_queued;
use super::{Admitted, LoadedModel};
use crate::ensemble::run::Run;
use crate::ensemble::Ensemble;
use crate::request::{select_outputs, trace_outputs, Answer, InferRequest};
use crate::response_stream::ResponseSender;
use crate::sequence_flags::ensemble_response_parameters;
use crate::stats::{FailureReason, RequestRecord, StepTimes};

impl LoadedModel {
    /// Starts the steps of an admitted request that feed the `wanted` outputs: its record
    /// (open until the steps are done; a caller that goes away first leaves it
    /// cancelled), the run, and the sums of the steps' times.
    fn begin(
        &self,
        ensemble: &Ensemble,
        mut request: InferRequest,
        admitted: &Admitted,
        wanted: Option<&[String]>,
    ) -> (Run, RequestRecord, Arc<StepTimes>) {
        let times = Arc::new(StepTimes::default());
        let mut record = RequestRecord::open(
            self.stats.clone(),
            admitted.received_at,
            admitted.step_times.clone(),
            FailureReason::Canceled,
        );
        // Its steps start now; each is pending in its own model's queue.
        record.executing();
        // Triton's ensemble scheduler records the request's queue entry and, at the
        // `TENSORS` level, its inputs as the client sent them.
        if let (false, Some(trace)) = (admitted.queue_traced, &request.trace) {
            trace_queued(trace, &request, Instant::now());
        }
        // The ensemble's own `reshape`s: its steps see the inputs in their reshape
        // layout, and its outputs, produced in theirs, go back to the client in `dims`.
        self.spec.reshape_inputs(&mut request.inputs);
        (
            ensemble.start(request, times.clone(), wanted),
            record,
            times,
        )
    }

    /// Runs an ensemble request and records it as Triton does: one execution of the
    /// request's batch size whose queue and compute times are the sums over its steps.
    pub(super) fn start_ensemble(
        self: &Arc<Self>,
        ensemble: &Ensemble,
        mut request: InferRequest,
        admitted: Admitted,
    ) -> Answer {
        let wanted = request.requested_outputs.take();
        let id = request.id.clone();
        let parameters = ensemble_response_parameters(&request);
        let trace = request.trace.clone();
        let (run, record, times) = self.begin(ensemble, request, &admitted, wanted.as_deref());
        let this = self.clone();
        Box::pin(async move {
            let outputs = run
                .finish()
                .await
                .and_then(|mut outputs| this.spec.reshape_outputs(&mut outputs).map(|()| outputs));
            let outputs = match outputs {
                Ok(outputs) => outputs,
                Err(e) => {
                    record.failed(FailureReason::Other);
                    return Err(e);
                }
            };
            let (queue, timing) = times.totals();
            this.stats
                .execution_finished(admitted.batch_size, admitted.batch_size, timing);
            record.succeeded(queue, timing);
            let outputs = select_outputs(outputs, wanted.as_deref());
            // As Triton records a response's outputs when it is sent.
            if let Some(trace) = &trace {
                trace_outputs(trace, &outputs);
            }
            let mut response = this.response(id, outputs);
            response.parameters = parameters;
            Ok(response)
        })
    }

    /// Runs a request of an ensemble with a decoupled step: each complete set of outputs
    /// goes to `sender` as it is made, the last one marked final, and the request is
    /// recorded as one execution once the steps are done.
    pub(super) fn stream_ensemble(
        self: &Arc<Self>,
        ensemble: &Ensemble,
        mut request: InferRequest,
        admitted: Admitted,
        sender: ResponseSender,
    ) {
        // The sender selects the outputs of each response; the run needs to know them.
        let wanted = request.requested_outputs.take();
        let parameters = ensemble_response_parameters(&request);
        let trace = request.trace.clone();
        let (run, record, times) = self.begin(ensemble, request, &admitted, wanted.as_deref());
        let this = self.clone();
        tokio::spawn(async move {
            let mut failed = false;
            run.drive(|result, last| match result {
                Some(result) => {
                    failed |= result.is_err();
                    if let (Some(trace), Ok(outputs)) = (&trace, &result) {
                        if trace.traces_tensors() {
                            let sent = select_outputs(outputs.clone(), wanted.as_deref());
                            trace_outputs(trace, &sent);
                        }
                    }
                    sender.send_with_parameters(result, parameters.clone(), last);
                }
                None => {
                    sender.close();
                }
            })
            .await;
            if failed {
                record.failed(FailureReason::Other);
                return;
            }
            let (queue, timing) = times.totals();
            this.stats
                .execution_finished(admitted.batch_size, admitted.batch_size, timing);
            record.succeeded(queue, timing);
        });
    }
}
