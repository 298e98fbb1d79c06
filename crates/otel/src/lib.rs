//! The `opentelemetry` trace mode's exporter, as Triton's: spans sent over OTLP/HTTP
//! (protobuf) to a collector with the OpenTelemetry SDK's exporter, resource attributes
//! from `--trace-config opentelemetry,resource=...` and `OTEL_RESOURCE_ATTRIBUTES`, and
//! W3C trace context (`traceparent`, `tracestate`) read with the SDK's propagator.
//!
//! Better than Triton: the export queue is bounded and its losses are counted in
//! `/metrics` (`nereid_trace_spans_dropped_total`), so a dead collector costs requests
//! nothing and is visible.

mod convert;
mod options;
mod queue;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nereid_core::metrics::text::{Family, Kind};
use nereid_core::trace::{FinishedTrace, RemoteParent, SpanSink};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, Key, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SpanExporter as _;
use opentelemetry_sdk::Resource;
use parking_lot::Mutex;

pub use options::{bsp_defaults, OtlpOptions, DEFAULT_SERVICE_NAME};

use queue::Queue;

/// How long shutdown waits for the last spans to reach the collector.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// The OTLP exporter: a [`SpanSink`] for the core's trace manager.
pub struct OtlpSink {
    queue: Arc<Queue>,
    /// Signals the export thread's end, for a bounded wait at shutdown.
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    propagator: TraceContextPropagator,
}

impl OtlpSink {
    /// Builds the exporter and starts its thread. Fails on a URL the exporter refuses;
    /// an unreachable collector is not an error (export failures are logged and
    /// counted).
    pub fn start(options: &OtlpOptions) -> Result<Arc<Self>, String> {
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
        if let Some(url) = &options.url {
            builder = builder.with_endpoint(url.clone());
        }
        let mut exporter = builder
            .build()
            .map_err(|e| format!("cannot create the OTLP exporter: {e}"))?;
        exporter.set_resource(&resource(&options.resource));
        let queue = Arc::new(Queue::new(
            options.max_queue_size,
            options.max_export_batch_size,
            options.schedule_delay,
        ));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let worker_queue = queue.clone();
        std::thread::Builder::new()
            .name("otlp-export".to_string())
            .spawn(move || {
                queue::run(worker_queue, exporter);
                let _ = done_tx.send(());
            })
            .map_err(|e| format!("cannot start the OTLP export thread: {e}"))?;
        Ok(Arc::new(Self {
            queue,
            done: Mutex::new(Some(done_rx)),
            propagator: TraceContextPropagator::new(),
        }))
    }

    /// The exporter's families in Prometheus text: spans exported, spans lost (by
    /// reason) and spans waiting.
    pub fn render_metrics(&self, out: &mut String) {
        let counters = &self.queue.counters;
        let name = "nereid_trace_spans_exported_total";
        let help = "Spans the opentelemetry trace mode exported to the collector";
        Family::start(out, name, help, Kind::Counter)
            .sample(&[], &counters.exported.load(Ordering::Relaxed));
        let name = "nereid_trace_spans_dropped_total";
        let help = "Spans the opentelemetry trace mode lost: queue_full when the export \
                    queue had no room, export_failed when the collector did not take them";
        let mut dropped = Family::start(out, name, help, Kind::Counter);
        let full = counters.dropped_queue_full.load(Ordering::Relaxed);
        dropped.sample(&[("reason", "queue_full")], &full);
        let failed = counters.dropped_export_failed.load(Ordering::Relaxed);
        dropped.sample(&[("reason", "export_failed")], &failed);
        let name = "nereid_trace_export_queue_spans";
        let help = "Spans waiting in the opentelemetry export queue";
        Family::start(out, name, help, Kind::Gauge).sample(&[], &(self.queue.len() as u64));
    }
}

impl SpanSink for OtlpSink {
    fn extract(&self, header: &dyn Fn(&str) -> Option<String>) -> Option<RemoteParent> {
        let headers = ContextHeaders {
            traceparent: header("traceparent")?,
            tracestate: header("tracestate"),
        };
        let context = self
            .propagator
            .extract_with_context(&Context::new(), &headers);
        let span = context.span();
        let parent = span.span_context();
        parent.is_valid().then(|| RemoteParent {
            trace_id: parent.trace_id().to_bytes(),
            span_id: parent.span_id().to_bytes(),
            flags: parent.trace_flags().to_u8(),
            trace_state: parent.trace_state().header(),
        })
    }

    fn submit(&self, trace: FinishedTrace) {
        self.queue.push(trace);
    }

    fn shutdown(&self) {
        self.queue.stop();
        if let Some(done) = self.done.lock().take() {
            if done.recv_timeout(SHUTDOWN_WAIT).is_err() {
                tracing::warn!(
                    "OpenTelemetry export did not finish within {SHUTDOWN_WAIT:?}; \
                     the last spans may be lost"
                );
            }
        }
    }
}

/// The two W3C headers, as the propagator reads them.
struct ContextHeaders {
    traceparent: String,
    tracestate: Option<String>,
}

impl Extractor for ContextHeaders {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(&self.traceparent),
            "tracestate" => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The resource: the SDK's detected attributes (`OTEL_RESOURCE_ATTRIBUTES`,
/// `OTEL_SERVICE_NAME`), Triton's `service.name` unless one was given there, then the
/// `--trace-config opentelemetry,resource=` pairs, which win.
fn resource(given: &[(String, String)]) -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    let mut builder = Resource::builder();
    if !named {
        builder = builder.with_service_name(DEFAULT_SERVICE_NAME);
    }
    builder
        .with_attributes(
            given
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_w3c_context_and_refuses_malformed_ones() {
        let sink = OtlpSink::start(&OtlpOptions::default()).expect("starts");
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let header = |name: &str| match name {
            "traceparent" => Some(parent.to_string()),
            "tracestate" => Some("congo=t61rcWkgMzE".to_string()),
            _ => None,
        };
        let remote = sink.extract(&header).expect("valid context");
        assert_eq!(remote.trace_id[0], 0x0a);
        assert_eq!(remote.span_id[7], 0x31);
        assert_eq!(remote.flags, 1);
        assert_eq!(remote.trace_state, "congo=t61rcWkgMzE");
        for bad in [
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "garbage",
        ] {
            let header = |name: &str| (name == "traceparent").then(|| bad.to_string());
            assert!(sink.extract(&header).is_none(), "{bad}");
        }
        assert!(sink.extract(&|_| None).is_none());
        sink.shutdown();
    }

    #[test]
    fn resource_defaults_to_tritons_service_name_and_takes_given_pairs() {
        let resource = resource(&[]);
        let name = resource.get(&Key::from_static_str("service.name"));
        assert_eq!(
            name.map(|v| v.as_str().into_owned()),
            Some(DEFAULT_SERVICE_NAME.into())
        );
        let resource = resource_with(&[("service.name", "nereid"), ("team", "ml")]);
        let get = |k: &'static str| {
            resource
                .get(&Key::from_static_str(k))
                .map(|v| v.as_str().into_owned())
        };
        assert_eq!(get("service.name").as_deref(), Some("nereid"));
        assert_eq!(get("team").as_deref(), Some("ml"));
    }

    fn resource_with(pairs: &[(&str, &str)]) -> Resource {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resource(&pairs)
    }
}
