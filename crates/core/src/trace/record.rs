//! A sampled request's trace: the records Triton's `TraceActivity` and
//! `TraceTensorActivity` write, collected per trace id and handed to the setting's stream
//! when the last part of the request lets go of it.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::setting::{Setting, TraceLevel, TraceMode};
use super::spans::{RemoteParent, SpanRecorder, SpanSink};
use super::Clock;
use nereid_proto::DataType;

/// Trace ids, process-wide and from 1 as Triton's.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Where a tensor was seen (Triton's tensor activities).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorActivity {
    /// An input as the request was queued.
    QueueInput,
    /// An input as the backend received it.
    BackendInput,
    /// An output as the backend produced it.
    BackendOutput,
}

impl TensorActivity {
    fn as_str(self) -> &'static str {
        match self {
            TensorActivity::QueueInput => "TENSOR_QUEUE_INPUT",
            TensorActivity::BackendInput => "TENSOR_BACKEND_INPUT",
            TensorActivity::BackendOutput => "TENSOR_BACKEND_OUTPUT",
        }
    }
}

/// The records of one sampled request and its ensemble steps. Dropping it (when the
/// frontend has sent the answer and every step is done) collects them.
struct TraceBuffer {
    /// What is traced (the setting's level when sampled, or the caller's).
    level: TraceLevel,
    clock: Clock,
    records: Records,
}

/// How the mode keeps records until the trace ends. Locked for each record, by the
/// request's own threads only.
enum Records {
    /// `triton`: one stream of JSON records per trace id, in the order the ids first
    /// wrote, for the setting's file.
    Json {
        streams: Mutex<Vec<(u64, String)>>,
        setting: Arc<Setting>,
    },
    /// `opentelemetry`: the activities, replayed into spans for the sink at the end.
    Spans {
        recorder: Mutex<Option<SpanRecorder>>,
        sink: Arc<dyn SpanSink>,
    },
    /// A trace the caller started itself (the C API's): each activity goes to it as it
    /// happens.
    Listened(Arc<dyn TraceListener>),
}

/// Where the activities of a trace a caller started itself go, as they happen
/// (`TRITONSERVER_ServerInferAsync` with a `TRITONSERVER_InferenceTrace`): Triton's
/// activities only, each with the id of the (child) trace it belongs to.
pub trait TraceListener: Send + Sync {
    /// The request behind trace `id` (a child of `parent_id`, 0 for none), as the core
    /// takes it, before its first activity.
    fn identify(&self, id: u64, parent_id: u64, model: &str, version: i64, request_id: &str);

    /// Activity `name` (`REQUEST_START`, `QUEUE_START`, `COMPUTE_*`, `REQUEST_END`)
    /// happened at `at`.
    fn timestamp(&self, id: u64, name: &str, at: Instant);

    /// A tensor was seen where `activity` says (only queued inputs and backend outputs:
    /// Triton reports no backend inputs).
    fn tensor(&self, id: u64, activity: TensorActivity, tensor: TracedTensor<'_>);

    /// Every activity of the trace and of its children has been reported.
    fn finished(&self);
}

/// A tensor as a trace reports it.
#[derive(Debug, Clone, Copy)]
pub struct TracedTensor<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its element type.
    pub datatype: DataType,
    /// Its shape.
    pub shape: &'a [i64],
    /// Its bytes, as the request or the backend holds them.
    pub data: &'a [u8],
}

impl Drop for TraceBuffer {
    fn drop(&mut self) {
        match &self.records {
            Records::Json { streams, setting } => {
                let streams = std::mem::take(&mut *streams.lock());
                let mut records = String::new();
                for (_, stream) in streams.iter().filter(|(_, s)| !s.is_empty()) {
                    if !records.is_empty() {
                        records.push(',');
                    }
                    records.push_str(stream);
                }
                setting.collect(&records);
            }
            Records::Spans { recorder, sink } => {
                if let Some(recorder) = recorder.lock().take() {
                    sink.submit(recorder.finish(&self.clock, Instant::now()));
                }
            }
            Records::Listened(listener) => listener.finished(),
        }
    }
}

/// A new trace id (process-wide, from 1 as Triton's), for a trace a caller starts
/// itself before handing it to [`RequestTrace::listened`].
pub fn next_trace_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A handle on one traced request (an ensemble step gets its own id under the same
/// buffer, with the ensemble's as `parent_id`). Cheap to clone; travels with the request.
#[derive(Clone)]
pub struct RequestTrace {
    buffer: Arc<TraceBuffer>,
    id: u64,
    parent_id: u64,
}

impl std::fmt::Debug for RequestTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestTrace")
            .field("id", &self.id)
            .field("parent_id", &self.parent_id)
            .finish()
    }
}

impl RequestTrace {
    /// A new trace; in the `opentelemetry` mode (with a sink) its spans continue
    /// `remote_parent` when the client sent one.
    pub(crate) fn new(
        setting: Arc<Setting>,
        clock: Clock,
        sink: Option<&Arc<dyn SpanSink>>,
        remote_parent: Option<RemoteParent>,
    ) -> Self {
        let records = match sink {
            Some(sink) if setting.mode == TraceMode::OpenTelemetry => Records::Spans {
                recorder: Mutex::new(Some(SpanRecorder::new(Instant::now(), remote_parent))),
                sink: sink.clone(),
            },
            _ => Records::Json {
                streams: Mutex::new(Vec::new()),
                setting: setting.clone(),
            },
        };
        Self {
            buffer: Arc::new(TraceBuffer {
                level: setting.values.level,
                clock,
                records,
            }),
            id: next_trace_id(),
            parent_id: 0,
        }
    }

    /// The trace `id` (child of `parent_id`, 0 for none) a caller started itself at
    /// `level`: its activities go to `listener` as they happen, and
    /// [`TraceListener::finished`] is called when the request and its steps are done.
    pub fn listened(
        listener: Arc<dyn TraceListener>,
        level: TraceLevel,
        id: u64,
        parent_id: u64,
    ) -> Self {
        Self {
            buffer: Arc::new(TraceBuffer {
                level,
                clock: Clock::now(),
                records: Records::Listened(listener),
            }),
            id,
            parent_id,
        }
    }

    /// The trace id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The trace of a request this one makes (an ensemble step).
    pub fn child(&self) -> Self {
        Self {
            buffer: self.buffer.clone(),
            id: next_trace_id(),
            parent_id: self.id,
        }
    }

    fn level(&self) -> TraceLevel {
        self.buffer.level
    }

    /// The caller's listener, for a trace it started itself.
    fn listener(&self) -> Option<&Arc<dyn TraceListener>> {
        match &self.buffer.records {
            Records::Listened(listener) => Some(listener),
            _ => None,
        }
    }

    /// Appends one JSON record to this id's stream (`triton` mode only).
    fn record(&self, write: impl FnOnce(&mut String)) {
        let Records::Json { streams, .. } = &self.buffer.records else {
            return;
        };
        let mut streams = streams.lock();
        let index = match streams.iter().position(|(id, _)| *id == self.id) {
            Some(index) => index,
            None => {
                streams.push((self.id, String::new()));
                streams.len() - 1
            }
        };
        let stream = &mut streams[index].1;
        if !stream.is_empty() {
            stream.push(',');
        }
        write(stream);
    }

    /// The span recorder, in the `opentelemetry` mode while the trace is running.
    fn spans(&self) -> Option<parking_lot::MappedMutexGuard<'_, SpanRecorder>> {
        let Records::Spans { recorder, .. } = &self.buffer.records else {
            return None;
        };
        parking_lot::MutexGuard::try_map(recorder.lock(), Option::as_mut).ok()
    }

    /// Records the activity `name` at `at` (with the `TIMESTAMPS` level).
    pub fn timestamp(&self, name: &str, at: Instant) {
        if !self.level().timestamps {
            return;
        }
        if let Some(mut spans) = self.spans() {
            spans.timestamp(self.id, name, at);
            return;
        }
        if let Some(listener) = self.listener() {
            listener.timestamp(self.id, name, at);
            return;
        }
        let ns = self.buffer.clock.ns(at);
        let id = self.id;
        self.record(|s| {
            let _ = write!(
                s,
                r#"{{"id":{id},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}"#
            );
        });
    }

    /// Records the request's identity and its `REQUEST_START`, as Triton writes them
    /// when the core takes the request.
    pub fn request_start(&self, model: &str, version: i64, request_id: &str, at: Instant) {
        if !self.level().timestamps {
            return;
        }
        let id = self.id;
        let parent_id = self.parent_id;
        if let Some(mut spans) = self.spans() {
            spans.request_start(id, parent_id, model, version, request_id, at);
            return;
        }
        if let Some(listener) = self.listener() {
            listener.identify(id, parent_id, model, version, request_id);
            self.timestamp("REQUEST_START", at);
            return;
        }
        self.record(|s| {
            let _ = write!(
                s,
                r#"{{"id":{id},"model_name":{},"model_version":{version}"#,
                json_string(model)
            );
            if !request_id.is_empty() {
                let _ = write!(s, r#","request_id":{}"#, json_string(request_id));
            }
            if parent_id != 0 {
                let _ = write!(s, r#","parent_id":{parent_id}"#);
            }
            s.push('}');
        });
        self.timestamp("REQUEST_START", at);
    }

    /// Records a tensor (with the `TENSORS` level): name, data, shape and type in
    /// Triton's format (see [`format_data`]). The `opentelemetry` mode records no
    /// tensors, as Triton's.
    pub fn tensor(
        &self,
        activity: TensorActivity,
        name: &str,
        datatype: DataType,
        shape: &[i64],
        data: &[u8],
    ) {
        if !self.level().tensors {
            return;
        }
        if let Some(listener) = self.listener() {
            if activity != TensorActivity::BackendInput {
                let tensor = TracedTensor {
                    name,
                    datatype,
                    shape,
                    data,
                };
                listener.tensor(self.id, activity, tensor);
            }
            return;
        }
        let id = self.id;
        self.record(|s| {
            let _ = write!(
                s,
                r#"{{"id":{id},"activity":"{}","tensor":{{"name":{},"data":"#,
                activity.as_str(),
                json_string(name)
            );
            s.push_str(&json_string(&format_data(datatype, data)));
            let shape: Vec<String> = shape.iter().map(i64::to_string).collect();
            let _ = write!(
                s,
                r#","shape":"{}","dtype":"{}"}}}}"#,
                shape.join(","),
                datatype.as_str()
            );
        });
    }

    /// Whether tensors are traced, so callers skip walking them otherwise.
    pub fn traces_tensors(&self) -> bool {
        self.level().tensors && !matches!(self.buffer.records, Records::Spans { .. })
    }
}

/// Records the activity `name` now on a request, if it is traced (the frontends' many
/// send and response stamps).
pub fn stamp(trace: Option<&RequestTrace>, name: &str) {
    if let Some(trace) = trace {
        trace.timestamp(name, Instant::now());
    }
}

/// A JSON string literal (Triton writes names unescaped; escaping keeps the file JSON).
fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

/// A tensor's elements as Triton's tracer prints them: comma separated, numbers as C++
/// streams print them (`%g` with 6 significant digits for floats), booleans as 0/1,
/// strings as `"..."`. Two deliberate differences: INT8/UINT8 print as numbers (Triton
/// streams them as raw characters) and FP16/BF16 print their values (Triton prints none).
/// Data shorter than the shape claims stops at the last whole element.
pub fn format_data(datatype: DataType, data: &[u8]) -> String {
    let mut out = String::new();
    let mut push = |item: &dyn std::fmt::Display| {
        if !out.is_empty() {
            out.push(',');
        }
        let _ = write!(out, "{item}");
    };
    macro_rules! each {
        ($t:ty, $f:expr) => {
            for chunk in data.chunks_exact(std::mem::size_of::<$t>()) {
                let mut bytes = [0u8; std::mem::size_of::<$t>()];
                bytes.copy_from_slice(chunk);
                push(&$f(<$t>::from_le_bytes(bytes)));
            }
        };
    }
    match datatype {
        DataType::Bool => each!(u8, |v: u8| u8::from(v != 0)),
        DataType::Uint8 => each!(u8, |v| v),
        DataType::Uint16 => each!(u16, |v| v),
        DataType::Uint32 => each!(u32, |v| v),
        DataType::Uint64 => each!(u64, |v| v),
        DataType::Int8 => each!(i8, |v| v),
        DataType::Int16 => each!(i16, |v| v),
        DataType::Int32 => each!(i32, |v| v),
        DataType::Int64 => each!(i64, |v| v),
        DataType::Fp16 => each!(u16, |v| format_g(f64::from(half::f16::from_bits(v)))),
        DataType::Bf16 => each!(u16, |v| format_g(f64::from(half::bf16::from_bits(v)))),
        DataType::Fp32 => each!(f32, |v| format_g(f64::from(v))),
        DataType::Fp64 => each!(f64, format_g),
        DataType::Bytes => {
            let mut rest = data;
            while rest.len() >= 4 {
                let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                let Some(bytes) = rest.get(4..4 + len) else {
                    break;
                };
                push(&format_args!("\"{}\"", String::from_utf8_lossy(bytes)));
                rest = &rest[4 + len..];
            }
        }
    }
    out
}

/// `v` as C++'s default stream output prints a double: `%g`, 6 significant digits.
pub fn format_g(v: f64) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    const PRECISION: i32 = 6;
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, v);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..PRECISION).contains(&exponent) {
        let decimals = (PRECISION - 1 - exponent).max(0) as usize;
        trim_zeros(&format!("{v:.decimals$}")).to_string()
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim_zeros(mantissa), exponent.abs())
    }
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}
