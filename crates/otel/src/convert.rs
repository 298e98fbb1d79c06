//! A finished trace from the core as the OpenTelemetry SDK's span records: ids from the
//! SDK's random generator, the client's trace continued when it sent a context.

use std::str::FromStr;

use nereid_core::trace::{AttributeValue, FinishedTrace};
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

/// Triton's tracer name, the instrumentation scope of every span.
pub const SCOPE_NAME: &str = "triton-server";

/// The spans of `trace`, parents first, all server spans as Triton's.
pub fn span_data(
    trace: FinishedTrace,
    ids: &RandomIdGenerator,
    scope: &InstrumentationScope,
) -> Vec<SpanData> {
    let (trace_id, remote_span, state) = match &trace.remote_parent {
        Some(parent) => (
            TraceId::from_bytes(parent.trace_id),
            Some(SpanId::from_bytes(parent.span_id)),
            TraceState::from_str(&parent.trace_state).unwrap_or_default(),
        ),
        None => (ids.new_trace_id(), None, TraceState::default()),
    };
    let span_ids: Vec<SpanId> = trace.spans.iter().map(|_| ids.new_span_id()).collect();
    trace
        .spans
        .into_iter()
        .zip(&span_ids)
        .map(|(span, &span_id)| {
            let local_parent = span.parent.and_then(|p| span_ids.get(p).copied());
            let mut events = SpanEvents::default();
            events.events = span
                .events
                .into_iter()
                .map(|(name, at)| Event::new(name, at, Vec::new(), 0))
                .collect();
            SpanData {
                span_context: SpanContext::new(
                    trace_id,
                    span_id,
                    TraceFlags::SAMPLED,
                    false,
                    state.clone(),
                ),
                parent_span_id: local_parent.or(remote_span).unwrap_or(SpanId::INVALID),
                parent_span_is_remote: local_parent.is_none() && remote_span.is_some(),
                span_kind: SpanKind::Server,
                name: span.name.into(),
                start_time: span.start,
                end_time: span.end,
                attributes: span
                    .attributes
                    .into_iter()
                    .map(|(key, value)| match value {
                        AttributeValue::Str(s) => KeyValue::new(key, s),
                        AttributeValue::Int(i) => KeyValue::new(key, i),
                    })
                    .collect(),
                dropped_attributes_count: 0,
                events,
                links: SpanLinks::default(),
                status: Status::Unset,
                instrumentation_scope: scope.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use nereid_core::trace::{FinishedSpan, RemoteParent};

    use super::*;

    fn span(name: &str, parent: Option<usize>) -> FinishedSpan {
        FinishedSpan {
            name: name.to_string(),
            parent,
            start: SystemTime::UNIX_EPOCH,
            end: SystemTime::UNIX_EPOCH + Duration::from_millis(1),
            attributes: vec![("triton.model_version", AttributeValue::Int(3))],
            events: vec![("QUEUE_START".to_string(), SystemTime::UNIX_EPOCH)],
        }
    }

    #[test]
    fn continues_the_clients_trace_and_links_parents() {
        let trace = FinishedTrace {
            remote_parent: Some(RemoteParent {
                trace_id: [7; 16],
                span_id: [9; 8],
                flags: 1,
                trace_state: "vendor=x".to_string(),
            }),
            spans: vec![span("InferRequest", None), span("m", Some(0))],
        };
        let scope = InstrumentationScope::builder(SCOPE_NAME).build();
        let spans = span_data(trace, &RandomIdGenerator::default(), &scope);
        assert_eq!(
            spans[0].span_context.trace_id(),
            TraceId::from_bytes([7; 16])
        );
        assert_eq!(spans[0].parent_span_id, SpanId::from_bytes([9; 8]));
        assert!(spans[0].parent_span_is_remote);
        assert_eq!(spans[1].parent_span_id, spans[0].span_context.span_id());
        assert!(!spans[1].parent_span_is_remote);
        assert_eq!(spans[1].span_context.trace_state().header(), "vendor=x");
        assert_eq!(
            spans[1].attributes,
            [KeyValue::new("triton.model_version", 3i64)]
        );
        assert_eq!(spans[1].events.events[0].name, "QUEUE_START");
    }

    #[test]
    fn a_trace_without_context_gets_a_new_root() {
        let trace = FinishedTrace {
            remote_parent: None,
            spans: vec![span("InferRequest", None)],
        };
        let scope = InstrumentationScope::builder(SCOPE_NAME).build();
        let spans = span_data(trace, &RandomIdGenerator::default(), &scope);
        assert_eq!(spans[0].parent_span_id, SpanId::INVALID);
        assert_ne!(spans[0].span_context.trace_id(), TraceId::INVALID);
        assert_eq!(spans[0].span_kind, SpanKind::Server);
    }
}
