//! The `opentelemetry` trace mode's side of the core: a sampled request's activities
//! replayed into spans as Triton's OpenTelemetry tracer shapes them, and the
//! [`SpanSink`] an exporter (the `nereid-otel` crate) implements to take them.
//!
//! Triton's shape: an `InferRequest` root span (child of the client's W3C context when
//! one was sent) carrying the frontend's events; under it one span per model request,
//! named after the model, from `REQUEST_START` to `REQUEST_END`, with Triton's
//! `triton.*` attributes; an ensemble step's model span nests under the ensemble's; and
//! a `compute` span from `COMPUTE_START` to `COMPUTE_END` under the model span. Every
//! activity is also an event on the span open at the time.

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use super::Clock;

/// A W3C trace context the client sent (`traceparent`, `tracestate`): the request's
/// spans continue its trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteParent {
    /// The trace the client's span belongs to.
    pub trace_id: [u8; 16],
    /// The client's span, parent of the `InferRequest` span.
    pub span_id: [u8; 8],
    /// The client's trace flags (bit 0: sampled).
    pub flags: u8,
    /// `tracestate`, passed on unchanged.
    pub trace_state: String,
}

/// A span attribute's value (Triton sets strings and integers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeValue {
    /// A string value.
    Str(String),
    /// An integer value.
    Int(i64),
}

/// One finished span: what an exporter needs besides the ids it assigns.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedSpan {
    /// Span name: `InferRequest`, the model's name, or `compute`.
    pub name: String,
    /// Index of the parent span in [`FinishedTrace::spans`]; `None` for the root, whose
    /// parent is the trace's remote parent if any.
    pub parent: Option<usize>,
    /// Wall-clock start.
    pub start: SystemTime,
    /// Wall-clock end.
    pub end: SystemTime,
    /// Triton's `triton.*` attributes (model spans only).
    pub attributes: Vec<(&'static str, AttributeValue)>,
    /// The activities recorded while this span was the innermost open one.
    pub events: Vec<(String, SystemTime)>,
}

/// One sampled request's spans, parents before children (the root first).
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedTrace {
    /// The client's trace context, when it sent one.
    pub remote_parent: Option<RemoteParent>,
    /// The spans; never empty.
    pub spans: Vec<FinishedSpan>,
}

/// Takes the finished traces of the `opentelemetry` mode. Implementations must not block:
/// [`SpanSink::submit`] runs as the request's last holder lets go of its trace.
pub trait SpanSink: Send + Sync {
    /// Reads a W3C trace context from a request's headers or gRPC metadata (`header`
    /// looks one up by lower-case name); `None` when absent or malformed.
    fn extract(&self, header: &dyn Fn(&str) -> Option<String>) -> Option<RemoteParent>;
    /// Queues a finished trace for export, dropping it (and counting the drop) when
    /// the queue is full.
    fn submit(&self, trace: FinishedTrace);
    /// Exports what is queued and stops (at shutdown); bounded in time.
    fn shutdown(&self);
}

/// An activity as recorded, replayed into spans when the request's trace ends.
#[derive(Debug)]
enum Activity {
    /// `REQUEST_START` with the request's identity.
    Start {
        id: u64,
        parent_id: u64,
        model: String,
        version: i64,
        request_id: String,
        at: Instant,
    },
    /// Any other timestamp.
    Stamp { id: u64, name: String, at: Instant },
}

/// The activities of one sampled request (and its ensemble steps), in record order.
#[derive(Debug)]
pub(crate) struct SpanRecorder {
    started: Instant,
    remote_parent: Option<RemoteParent>,
    activities: Vec<Activity>,
}

/// The activities Triton's core reports (they open, annotate and close the model and
/// compute spans); the rest come from the frontends and go to the root span.
fn is_core_activity(name: &str) -> bool {
    matches!(
        name,
        "QUEUE_START"
            | "COMPUTE_START"
            | "COMPUTE_INPUT_END"
            | "COMPUTE_OUTPUT_START"
            | "COMPUTE_END"
            | "REQUEST_END"
    )
}

impl SpanRecorder {
    pub(crate) fn new(started: Instant, remote_parent: Option<RemoteParent>) -> Self {
        Self {
            started,
            remote_parent,
            activities: Vec::new(),
        }
    }

    pub(crate) fn request_start(
        &mut self,
        id: u64,
        parent_id: u64,
        model: &str,
        version: i64,
        request_id: &str,
        at: Instant,
    ) {
        self.activities.push(Activity::Start {
            id,
            parent_id,
            model: model.to_string(),
            version,
            request_id: request_id.to_string(),
            at,
        });
    }

    pub(crate) fn timestamp(&mut self, id: u64, name: &str, at: Instant) {
        self.activities.push(Activity::Stamp {
            id,
            name: name.to_string(),
            at,
        });
    }

    /// The spans, the root ending at `ended` (as Triton's ends when the trace is
    /// released); spans never closed end there too.
    pub(crate) fn finish(self, clock: &Clock, ended: Instant) -> FinishedTrace {
        let mut spans = vec![FinishedSpan {
            name: "InferRequest".to_string(),
            parent: None,
            start: clock.wall(self.started),
            end: clock.wall(ended),
            attributes: Vec::new(),
            events: Vec::new(),
        }];
        // Per trace id: the open spans, innermost last, and the model span (the parent
        // of the id's ensemble steps).
        let mut open: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut model_span: HashMap<u64, usize> = HashMap::new();
        let start_span =
            |spans: &mut Vec<FinishedSpan>, name: String, parent: usize, at: Instant| {
                spans.push(FinishedSpan {
                    name,
                    parent: Some(parent),
                    start: clock.wall(at),
                    end: clock.wall(ended),
                    attributes: Vec::new(),
                    events: Vec::new(),
                });
                spans.len() - 1
            };
        for activity in self.activities {
            match activity {
                Activity::Start {
                    id,
                    parent_id,
                    model,
                    version,
                    request_id,
                    at,
                } => {
                    let parent = match parent_id {
                        0 => 0,
                        parent_id => model_span.get(&parent_id).copied().unwrap_or(0),
                    };
                    let index = start_span(&mut spans, model.clone(), parent, at);
                    let span = &mut spans[index];
                    span.attributes = vec![
                        ("triton.model_name", AttributeValue::Str(model)),
                        ("triton.model_version", AttributeValue::Int(version)),
                        ("triton.trace_id", AttributeValue::Int(id as i64)),
                        (
                            "triton.trace_parent_id",
                            AttributeValue::Int(parent_id as i64),
                        ),
                    ];
                    if !request_id.is_empty() {
                        span.attributes
                            .push(("triton.request_id", AttributeValue::Str(request_id)));
                    }
                    span.events
                        .push(("REQUEST_START".to_string(), clock.wall(at)));
                    model_span.insert(id, index);
                    open.entry(id).or_default().push(index);
                }
                Activity::Stamp { id, name, at } if is_core_activity(&name) => {
                    let stack = open.entry(id).or_default();
                    if name == "COMPUTE_START" {
                        let parent = stack.last().copied().unwrap_or(0);
                        let index = start_span(&mut spans, "compute".to_string(), parent, at);
                        stack.push(index);
                    }
                    let target = stack.last().copied().unwrap_or(0);
                    spans[target].events.push((name.clone(), clock.wall(at)));
                    if matches!(name.as_str(), "COMPUTE_END" | "REQUEST_END") && target != 0 {
                        spans[target].end = clock.wall(at);
                        stack.pop();
                    }
                }
                Activity::Stamp { name, at, .. } => {
                    spans[0].events.push((name, clock.wall(at)));
                }
            }
        }
        FinishedTrace {
            remote_parent: self.remote_parent,
            spans,
        }
    }
}
