//! The bounded export queue between requests and the collector: requests add finished
//! traces without waiting (a full queue drops them and counts the spans), one thread
//! sends batches of at most `max_export_batch_size` spans when a batch is full or
//! `schedule_delay` has passed, as the SDK's batch span processor does. A slow or dead
//! collector only ever stalls that thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_core::trace::FinishedTrace;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::trace::{RandomIdGenerator, SpanData, SpanExporter};
use parking_lot::{Condvar, Mutex};

use crate::convert::{span_data, SCOPE_NAME};

/// Counters of what happened to spans, for `/metrics`.
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Spans the collector accepted.
    pub exported: AtomicU64,
    /// Spans dropped because the queue was full (or the exporter had stopped).
    pub dropped_queue_full: AtomicU64,
    /// Spans lost because an export failed (collector down, refused, timed out).
    pub dropped_export_failed: AtomicU64,
}

/// The queue and its limits, shared by the requests and the export thread.
pub(crate) struct Queue {
    state: Mutex<State>,
    wake: Condvar,
    max_spans: usize,
    batch_spans: usize,
    delay: Duration,
    pub(crate) counters: ExportCounters,
}

#[derive(Default)]
struct State {
    traces: VecDeque<FinishedTrace>,
    spans: usize,
    stopping: bool,
    /// Whether a drop has been logged since the queue last had room, so a dead
    /// collector gives one warning rather than one per request.
    drop_logged: bool,
}

impl Queue {
    pub(crate) fn new(max_spans: usize, batch_spans: usize, delay: Duration) -> Self {
        Self {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            max_spans,
            batch_spans,
            delay,
            counters: ExportCounters::default(),
        }
    }

    /// Adds a trace if its spans fit; never blocks for longer than the lock.
    pub(crate) fn push(&self, trace: FinishedTrace) {
        let spans = trace.spans.len();
        let mut state = self.state.lock();
        if state.stopping || state.spans + spans > self.max_spans {
            self.counters
                .dropped_queue_full
                .fetch_add(spans as u64, Ordering::Relaxed);
            if !std::mem::replace(&mut state.drop_logged, true) {
                tracing::warn!(
                    "OpenTelemetry export queue full ({} spans): dropping spans until the \
                     collector catches up",
                    self.max_spans
                );
            }
            return;
        }
        state.drop_logged = false;
        state.traces.push_back(trace);
        state.spans += spans;
        if state.spans >= self.batch_spans {
            self.wake.notify_one();
        }
    }

    /// Spans waiting for export.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().spans
    }

    /// Asks the export thread to send what is queued and stop.
    pub(crate) fn stop(&self) {
        self.state.lock().stopping = true;
        self.wake.notify_one();
    }

    /// The next batch: waits until one is full, the delay has passed, or the queue
    /// stops; `None` once stopped and empty.
    fn next_batch(&self) -> Option<Vec<FinishedTrace>> {
        let mut state = self.state.lock();
        loop {
            let deadline = Instant::now() + self.delay;
            while state.spans < self.batch_spans && !state.stopping {
                if self.wake.wait_until(&mut state, deadline).timed_out() {
                    break;
                }
            }
            if !state.traces.is_empty() {
                break;
            }
            if state.stopping {
                return None;
            }
        }
        let mut batch = Vec::new();
        let mut spans = 0;
        while let Some(trace) = state.traces.front() {
            if !batch.is_empty() && spans + trace.spans.len() > self.batch_spans {
                break;
            }
            spans += trace.spans.len();
            batch.extend(state.traces.pop_front());
        }
        state.spans -= spans;
        Some(batch)
    }
}

/// The export thread's loop: batches to the exporter on a single-threaded runtime
/// until the queue stops, then the exporter shuts down.
pub(crate) fn run<E: SpanExporter>(queue: Arc<Queue>, exporter: E) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("OpenTelemetry export disabled: cannot start its runtime: {e}");
            queue.stop();
            return;
        }
    };
    let ids = RandomIdGenerator::default();
    let scope = InstrumentationScope::builder(SCOPE_NAME).build();
    let mut failing = false;
    while let Some(batch) = queue.next_batch() {
        let spans: Vec<SpanData> = batch
            .into_iter()
            .flat_map(|trace| span_data(trace, &ids, &scope))
            .collect();
        let count = spans.len() as u64;
        match runtime.block_on(exporter.export(spans)) {
            Ok(()) => {
                queue.counters.exported.fetch_add(count, Ordering::Relaxed);
                if std::mem::take(&mut failing) {
                    tracing::info!("OpenTelemetry export to the collector works again");
                }
            }
            Err(e) => {
                queue
                    .counters
                    .dropped_export_failed
                    .fetch_add(count, Ordering::Relaxed);
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!("OpenTelemetry export failed, {count} spans lost: {e}");
                }
            }
        }
    }
    if let Err(e) = exporter.shutdown() {
        tracing::debug!("OpenTelemetry exporter shutdown: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use nereid_core::trace::FinishedSpan;
    use opentelemetry_sdk::error::OTelSdkResult;

    use super::*;

    fn trace(spans: usize) -> FinishedTrace {
        let span = FinishedSpan {
            name: "s".to_string(),
            parent: None,
            start: SystemTime::UNIX_EPOCH,
            end: SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            events: Vec::new(),
        };
        FinishedTrace {
            remote_parent: None,
            spans: vec![span; spans],
        }
    }

    #[test]
    fn a_full_queue_drops_whole_traces_and_counts_their_spans() {
        let queue = Queue::new(5, 5, Duration::from_secs(60));
        queue.push(trace(3));
        queue.push(trace(3));
        queue.push(trace(2));
        assert_eq!(queue.len(), 5);
        assert_eq!(queue.counters.dropped_queue_full.load(Ordering::Relaxed), 3);
        queue.stop();
        queue.push(trace(1));
        assert_eq!(queue.counters.dropped_queue_full.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn batches_hold_at_most_the_batch_size_but_at_least_one_trace() {
        let queue = Queue::new(100, 4, Duration::from_secs(60));
        for spans in [2, 2, 5, 1] {
            queue.push(trace(spans));
        }
        queue.stop();
        let sizes: Vec<Vec<usize>> = std::iter::from_fn(|| queue.next_batch())
            .map(|batch| batch.iter().map(|t| t.spans.len()).collect())
            .collect();
        assert_eq!(sizes, [vec![2, 2], vec![5], vec![1]]);
        assert_eq!(queue.len(), 0);
    }

    #[derive(Debug)]
    struct Exporter {
        fail: bool,
        seen: Arc<Mutex<Vec<usize>>>,
    }

    impl SpanExporter for Exporter {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.seen.lock().push(batch.len());
            if self.fail {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    "collector down".into(),
                ))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn the_thread_exports_what_is_queued_and_counts_failures() {
        for fail in [false, true] {
            let queue = Arc::new(Queue::new(100, 3, Duration::from_millis(10)));
            let seen = Arc::new(Mutex::new(Vec::new()));
            let exporter = Exporter {
                fail,
                seen: seen.clone(),
            };
            let worker = {
                let queue = queue.clone();
                std::thread::spawn(move || run(queue, exporter))
            };
            queue.push(trace(3));
            queue.push(trace(1));
            queue.stop();
            worker.join().expect("export thread ends");
            assert_eq!(seen.lock().iter().sum::<usize>(), 4);
            let counters = &queue.counters;
            let (ok, failed) = (
                counters.exported.load(Ordering::Relaxed),
                counters.dropped_export_failed.load(Ordering::Relaxed),
            );
            assert_eq!((ok, failed), if fail { (0, 4) } else { (4, 0) });
        }
    }
}
