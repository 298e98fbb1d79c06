//! One trace setting as Triton's `TraceSetting`: the values, which of them were set for
//! this scope, the sampling counters, and the stream of collected traces waiting to be
//! written to its [`TraceFile`].

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// What a trace records (Triton's `TRITONSERVER_InferenceTraceLevel`, a bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceLevel {
    /// `TIMESTAMPS`: the activity timestamps.
    pub timestamps: bool,
    /// `TENSORS`: the input and output tensors.
    pub tensors: bool,
}

impl TraceLevel {
    /// `OFF`.
    pub const OFF: Self = Self {
        timestamps: false,
        tensors: false,
    };

    /// Whether nothing is traced.
    pub fn is_off(self) -> bool {
        !self.timestamps && !self.tensors
    }

    /// The level as Triton lists it: `["OFF"]`, or `TIMESTAMPS` then `TENSORS`.
    pub fn names(self) -> Vec<&'static str> {
        if self.is_off() {
            return vec!["OFF"];
        }
        let mut names = Vec::with_capacity(2);
        if self.timestamps {
            names.push("TIMESTAMPS");
        }
        if self.tensors {
            names.push("TENSORS");
        }
        names
    }
}

/// How traces are reported (`--trace-config mode=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceMode {
    /// Triton's JSON trace files.
    #[default]
    Triton,
    /// Spans handed to a [`super::SpanSink`] (the binary's OTLP exporter).
    OpenTelemetry,
}

impl TraceMode {
    /// The mode's name as Triton answers it.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceMode::Triton => "triton",
            TraceMode::OpenTelemetry => "opentelemetry",
        }
    }
}

/// The values of a setting that can change at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Values {
    pub level: TraceLevel,
    pub rate: u32,
    pub count: i32,
    pub log_frequency: u32,
}

/// Which of the values were given for this scope (the rest mirror the fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Specified {
    pub level: bool,
    pub rate: bool,
    pub count: bool,
    pub log_frequency: bool,
}

impl Specified {
    pub fn none(self) -> bool {
        !(self.level || self.rate || self.count || self.log_frequency)
    }
}

/// Sampling counters and the traces collected since the last write. Guarded by the
/// setting's mutex: taken once per request while tracing is on, and once per trace.
#[derive(Debug, Default)]
struct Counters {
    /// Requests seen (`sample_` in Triton).
    seen: u64,
    /// Traces still to sample; -1 is unlimited. Counts down.
    count: i32,
    /// Traces sampled and traces written to the stream.
    created: u64,
    collected: u64,
    /// Traces in `stream`, and their JSON, comma separated.
    in_stream: u32,
    stream: String,
}

/// One scope's setting (global or one model). Replaced, never changed, on update, so a
/// trace keeps the setting it was sampled under; dropping the last reference writes what
/// it still holds, as Triton's destructor does.
#[derive(Debug)]
pub struct Setting {
    pub(crate) values: Values,
    pub(crate) specified: Specified,
    pub(crate) file: Arc<TraceFile>,
    pub(crate) mode: TraceMode,
    counters: Mutex<Counters>,
}

impl Setting {
    pub(crate) fn new(
        values: Values,
        specified: Specified,
        file: Arc<TraceFile>,
        mode: TraceMode,
    ) -> Self {
        Self {
            counters: Mutex::new(Counters {
                count: values.count,
                ..Counters::default()
            }),
            values,
            specified,
            file,
            mode,
        }
    }

    /// Why this setting cannot trace (Triton's `Reason()`), if it cannot.
    pub(crate) fn invalid_reason(&self) -> Option<&'static str> {
        if self.values.level.is_off() {
            Some("tracing is disabled")
        } else if self.values.rate == 0 {
            Some("sample rate must be non-zero")
        } else if self.mode == TraceMode::Triton && self.file.name().is_empty() {
            Some("trace file name is not given")
        } else if self.current_count() == 0 {
            Some("trace count is 0: no more traces would be sampled")
        } else {
            None
        }
    }

    /// The traces still to sample (-1: unlimited), as the settings answer shows it.
    pub(crate) fn current_count(&self) -> i32 {
        self.counters.lock().count
    }

    /// The values with the count as it stands now.
    pub(crate) fn current_values(&self) -> Values {
        Values {
            count: self.current_count(),
            ..self.values
        }
    }

    /// Whether this request is one to trace: every `rate`-th request while the count
    /// lasts, or any request with `force` (a propagated OpenTelemetry context), which
    /// still counts towards the rate (Triton's `SampleTrace`). A rate of 0 samples
    /// only forced requests.
    pub(crate) fn sample(&self, force: bool) -> bool {
        if self.values.level.is_off()
            || (self.mode == TraceMode::Triton && self.file.name().is_empty())
        {
            return false;
        }
        if self.values.rate == 0 {
            return force;
        }
        let mut counters = self.counters.lock();
        if counters.count == 0 && !force {
            return false;
        }
        counters.seen += 1;
        let hit = counters.seen.is_multiple_of(u64::from(self.values.rate)) && counters.count != 0;
        if hit && counters.count > 0 {
            counters.count -= 1;
        }
        if hit {
            counters.created += 1;
        }
        hit || force
    }

    /// Adds one finished trace (its records, already comma separated; none when nothing
    /// was recorded) to the stream, and writes the stream to the next indexed file every
    /// `log_frequency` traces, or once the last trace the count allowed is in.
    pub(crate) fn collect(&self, records: &str) {
        let mut counters = self.counters.lock();
        counters.collected += 1;
        if !records.is_empty() {
            if counters.in_stream != 0 {
                counters.stream.push(',');
            }
            counters.stream.push_str(records);
            counters.in_stream += 1;
        }
        let frequency = self.values.log_frequency;
        let done = counters.count == 0 && counters.collected == counters.created;
        let full = frequency != 0 && counters.in_stream >= frequency;
        if counters.in_stream > 0 && (done || full) {
            counters.in_stream = 0;
            let stream = std::mem::take(&mut counters.stream);
            drop(counters);
            self.file.save(&stream, true);
        }
    }

    /// Writes what the stream still holds (at replacement or shutdown): to the next
    /// indexed file with a log frequency, else appended to the trace file.
    pub(crate) fn flush(&self) {
        let mut counters = self.counters.lock();
        if self.mode != TraceMode::Triton || counters.in_stream == 0 {
            return;
        }
        counters.in_stream = 0;
        let stream = std::mem::take(&mut counters.stream);
        drop(counters);
        self.file.save(&stream, self.values.log_frequency != 0);
    }
}

impl Drop for Setting {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A trace file shared by the settings that name it: `<file>` collects traces until it
/// is closed (`[` at the first write, `]` at the end), `<file>.<n>` get one batch each.
#[derive(Debug)]
pub struct TraceFile {
    name: String,
    index: AtomicU32,
    // The open trace file once written; the lock orders appends from concurrent traces.
    appended: Mutex<Option<std::fs::File>>,
}

impl TraceFile {
    /// A trace file at `name` (empty: none given), created at its first write.
    pub fn new(name: String) -> Self {
        Self {
            name,
            index: AtomicU32::new(0),
            appended: Mutex::new(None),
        }
    }

    /// The path as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Saves a batch of traces. A write error is logged and the traces are lost: tracing
    /// never fails a request.
    pub(crate) fn save(&self, stream: &str, to_index_file: bool) {
        let result = if to_index_file {
            let path = format!(
                "{}.{}",
                self.name,
                self.index.fetch_add(1, Ordering::Relaxed)
            );
            write_whole(&path, &format!("[{stream}]")).map_err(|e| (path, e))
        } else {
            self.append(stream).map_err(|e| (self.name.clone(), e))
        };
        if let Err((path, e)) = result {
            tracing::error!("failed writing trace file '{path}': {e}");
        }
    }

    fn append(&self, stream: &str) -> std::io::Result<()> {
        let mut appended = self.appended.lock();
        match appended.as_mut() {
            Some(file) => write!(file, ",{stream}"),
            None => {
                let mut file = std::fs::File::create(&self.name)?;
                write!(file, "[{stream}")?;
                *appended = Some(file);
                Ok(())
            }
        }
    }

    /// Ends the trace file's JSON array, if it was started.
    pub(crate) fn close(&self) {
        if let Some(mut file) = self.appended.lock().take() {
            if let Err(e) = file.write_all(b"]") {
                tracing::error!("failed writing trace file '{}': {e}", self.name);
            }
        }
    }
}

/// Writes `contents` under a hidden temporary name beside `path`, then renames it, so a
/// reader watching the trace files (Triton's QA, a log shipper) never opens one half
/// written: Triton truncates and writes in place, and a reader can see it empty.
fn write_whole(path: &str, contents: &str) -> std::io::Result<()> {
    let target = std::path::Path::new(path);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = target.with_file_name(format!(".{name}.partial"));
    std::fs::write(&partial, contents)?;
    std::fs::rename(&partial, target)
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        self.close();
    }
}
