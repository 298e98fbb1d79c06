//! The response-cache path of a cache-enabled model: look the request up, compute it
//! through the scheduler on a miss, and answer the request's own output selection from
//! the entry, which holds every output.

use std::sync::Arc;
use std::time::Instant;

use super::traced::trace_queued;
use super::{Admitted, LoadedModel};
use crate::cache::key::CacheKey;
use crate::cache::{Lookup, Outcome, ResponseCache};
use crate::error::Result;
use crate::request::{select_outputs, trace_outputs, InferRequest, InferResponse};

impl LoadedModel {
    /// The cache stores every output; the request's own selection is applied afterwards,
    /// so a request for any subset of outputs can be answered from the same entry.
    ///
    /// Traced as Triton's schedulers do (core `DynamicBatchScheduler::Enqueue`): the
    /// request is queued (`QUEUE_START`, its inputs) before the lookup, once whether it
    /// hits or not, and a hit's response records its outputs as the one a backend sends.
    pub(super) async fn infer_cached(
        self: &Arc<Self>,
        cache: &ResponseCache,
        mut request: InferRequest,
        mut admitted: Admitted,
    ) -> Result<InferResponse> {
        let wanted = request.requested_outputs.take();
        let received_at = admitted.received_at;
        let trace = request.trace.clone();
        if let Some(trace) = &trace {
            trace_queued(trace, &request, Instant::now());
            admitted.queue_traced = true;
        }
        // The lookup's key borrows the request; only a miss, which the flight and the store
        // keep, owns a copy.
        let key = CacheKey::of(&self.spec.name, self.spec.version, &request);
        let (id, outputs, outcome) = match cache.lookup(&key).await {
            Lookup::Hit(outputs, lookup) => {
                let id = std::mem::take(&mut request.id);
                (id, Ok(outputs), Outcome::Hit { lookup })
            }
            Lookup::Miss(lookup) => {
                let key = key.to_stored();
                let id = request.id.clone();
                let compute = || async move {
                    let response = self.start(request, admitted)?.await?;
                    Ok(response.outputs.shared())
                };
                // Boxed: the miss path's future (the flight, the scheduler's answer) is
                // most of this one's size, and a hit should not carry it: the hit's future
                // is built and moved whole for every request.
                let (outputs, outcome) = Box::pin(cache.compute(key, lookup, compute)).await;
                (id, outputs, outcome)
            }
        };
        match outcome {
            Outcome::Hit { lookup } => self.stats.cache_hit(received_at.elapsed(), lookup),
            Outcome::Miss { lookup_and_insert } => self.stats.cache_miss(lookup_and_insert),
            Outcome::Uncached => {}
        }
        let hit = matches!(outcome, Outcome::Hit { .. });
        let outputs = select_outputs(outputs?, wanted.as_deref());
        if let (true, Some(trace)) = (hit, &trace) {
            trace_outputs(trace, &outputs);
        }
        Ok(self.response(id, outputs))
    }
}
