use std::time::{Duration, Instant};

use super::*;
use nereid_proto::DataType;

fn options(file: &std::path::Path, rate: u32, count: i32, log_frequency: u32) -> TraceOptions {
    TraceOptions {
        level: TraceLevel {
            timestamps: true,
            tensors: false,
        },
        rate,
        count,
        log_frequency,
        file: file.display().to_string(),
        mode: TraceMode::Triton,
        mode_settings: Vec::new(),
    }
}

fn scalar(name: &str, value: &str) -> (String, SettingValue) {
    (name.to_string(), SettingValue::Scalar(value.to_string()))
}

fn read(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("trace file written");
    serde_json::from_str(&text).expect("trace file is JSON")
}

/// Samples `n` requests for `model`, finishing each trace at once.
fn run(manager: &TraceManager, model: &str, n: usize) -> usize {
    (0..n)
        .filter_map(|_| manager.sample(model))
        .map(|trace| trace.timestamp("REQUEST_START", Instant::now()))
        .count()
}

#[test]
fn off_by_default_and_samples_nothing() {
    let manager = TraceManager::disabled();
    assert!(!manager.is_active());
    assert!(manager.sample("m").is_none());
    let view = manager.settings(None);
    assert_eq!(view.level, TraceLevel::OFF);
    assert_eq!((view.rate, view.count, view.log_frequency), (1000, -1, 0));
}

#[test]
fn every_rate_th_request_is_sampled_while_the_count_lasts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.json");
    let manager = TraceManager::new(&options(&file, 3, -1, 0), None).expect("valid");
    assert_eq!(run(&manager, "m", 9), 3);
    let manager = TraceManager::new(&options(&file, 2, 2, 0), None).expect("valid");
    assert_eq!(manager.settings(None).count, 2);
    assert_eq!(run(&manager, "m", 10), 2);
    // The count counts down, as the settings answer shows.
    assert_eq!(manager.settings(None).count, 0);
    assert!(manager.sample("m").is_none());
    // A new count starts sampling again.
    manager
        .update(None, &[scalar("trace_count", "1")])
        .expect("new count");
    assert_eq!(run(&manager, "m", 4), 1);
}

#[test]
fn log_frequency_writes_indexed_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.json");
    let manager = TraceManager::new(&options(&file, 1, -1, 2), None).expect("valid");
    assert_eq!(run(&manager, "m", 5), 5);
    let first = read(&dir.path().join("t.json.0"));
    let second = read(&dir.path().join("t.json.1"));
    assert_eq!(first.as_array().map(Vec::len), Some(2));
    assert_eq!(second.as_array().map(Vec::len), Some(2));
    assert!(!dir.path().join("t.json.2").exists());
    // The fifth trace waits for the next batch, or shutdown.
    manager.flush();
    assert_eq!(
        read(&dir.path().join("t.json.2")).as_array().map(Vec::len),
        Some(1)
    );
    assert!(!file.exists());
    // Each file appears whole, by rename: no temporary file is left beside them.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    assert_eq!(names, ["t.json.0", "t.json.1", "t.json.2"]);
}

#[test]
fn without_log_frequency_the_file_is_written_at_shutdown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.json");
    let manager = TraceManager::new(&options(&file, 1, -1, 0), None).expect("valid");
    assert_eq!(run(&manager, "m", 3), 3);
    assert!(!file.exists());
    manager.flush();
    let records = read(&file);
    assert_eq!(records.as_array().map(Vec::len), Some(3));
}

#[test]
fn the_last_counted_trace_writes_the_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.json");
    let manager = TraceManager::new(&options(&file, 1, 2, 0), None).expect("valid");
    assert_eq!(run(&manager, "m", 3), 2);
    assert_eq!(
        read(&dir.path().join("t.json.0")).as_array().map(Vec::len),
        Some(2)
    );
}

#[test]
fn records_have_tritons_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.json");
    let mut opts = options(&file, 1, -1, 1);
    opts.level.tensors = true;
    let manager = TraceManager::new(&opts, None).expect("valid");
    let trace = manager.sample("m").expect("sampled");
    let start = Instant::now();
    trace.request_start("m", 3, "req\"1", start);
    trace.timestamp("QUEUE_START", start + Duration::from_nanos(10));
    let data: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    trace.tensor(
        TensorActivity::QueueInput,
        "IN",
        DataType::Fp32,
        &[1, 2],
        &data,
    );
    let child = trace.child();
    child.request_start("step", 1, "", start);
    let id = trace.id();
    drop((trace, child));
    let records = read(&dir.path().join("t.json.0"));
    let records = records.as_array().expect("array");
    assert_eq!(
        records[0],
        serde_json::json!({"id": id, "model_name": "m", "model_version": 3, "request_id": "req\"1"})
    );
    assert_eq!(records[1]["timestamps"][0]["name"], "REQUEST_START");
    assert_eq!(records[2]["timestamps"][0]["name"], "QUEUE_START");
    let ns = |r: &serde_json::Value| r["timestamps"][0]["ns"].as_u64().expect("ns");
    assert_eq!(ns(&records[2]) - ns(&records[1]), 10);
    assert_eq!(
        records[3],
        serde_json::json!({"id": id, "activity": "TENSOR_QUEUE_INPUT",
            "tensor": {"name": "IN", "data": "1.5,-2", "shape": "1,2", "dtype": "FP32"}})
    );
    assert_eq!(
        records[4],
        serde_json::json!({"id": id + 1, "model_name": "step", "model_version": 1, "parent_id": id})
    );
}

#[test]
fn model_settings_fall_back_to_the_global_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.json");
    let manager = TraceManager::new(&options(&file, 1, -1, 0), None).expect("valid");
    manager
        .update(Some("m"), &[scalar("trace_rate", "4")])
        .expect("model rate");
    assert_eq!(manager.settings(Some("m")).rate, 4);
    assert_eq!(manager.settings(Some("other")).rate, 1);
    // Unset keys follow later global updates.
    manager
        .update(None, &[scalar("log_frequency", "7")])
        .expect("global frequency");
    assert_eq!(manager.settings(Some("m")).log_frequency, 7);
    assert_eq!(manager.settings(Some("m")).rate, 4);
    // Clearing the model's only value removes its setting.
    manager
        .update(
            Some("m"),
            &[("trace_rate".to_string(), SettingValue::Clear)],
        )
        .expect("clear");
    assert_eq!(manager.settings(Some("m")).rate, 1);
    // A model can trace while the global setting is off.
    let off = [(
        "trace_level".to_string(),
        SettingValue::List(vec!["OFF".into()]),
    )];
    manager.update(None, &off).expect("off");
    let on = [(
        "trace_level".to_string(),
        SettingValue::List(vec!["TIMESTAMPS".into()]),
    )];
    manager.update(Some("m"), &on).expect("model on");
    assert!(manager.is_active());
    assert!(manager.sample("other").is_none());
    assert!(manager.sample("m").is_some());
}

#[test]
fn bad_updates_are_refused_with_tritons_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manager =
        TraceManager::new(&options(&dir.path().join("t.json"), 1, -1, 0), None).expect("valid");
    let message = |settings: &[(String, SettingValue)]| {
        manager
            .update(None, settings)
            .expect_err("refused")
            .message()
            .to_string()
    };
    assert_eq!(
        message(&[scalar("trace_rate", "abc")]),
        "Unable to parse 'trace_rate', got: abc"
    );
    assert_eq!(
        message(&[scalar("trace_rate", "-1")]),
        "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -1"
    );
    assert_eq!(
        message(&[scalar("trace_rate", "0")]),
        "Attempting to set invalid trace setting :sample rate must be non-zero"
    );
    assert_eq!(
        message(&[scalar("trace_count", "-2")]),
        "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"
    );
    assert!(message(&[scalar("trace_level", "TIMESTAMPS")]).contains("expected an array"));
    let levels = |l: &[&str]| {
        vec![(
            "trace_level".to_string(),
            SettingValue::List(l.iter().map(|s| s.to_string()).collect()),
        )]
    };
    assert_eq!(
        message(&levels(&["OFF", "TIMESTAMPS"])),
        "Expect only one trace level 'OFF' is specified"
    );
    assert!(message(&levels(&["LOUD"])).contains("got: LOUD"));
    assert!(message(&[scalar("colour", "red")]).contains("unknown trace setting 'colour'"));
    let refused = manager
        .update(None, &[scalar("trace_file", "/tmp/x")])
        .expect_err("refused");
    assert_eq!(refused.kind(), crate::error::ErrorKind::Unsupported);
    // Nothing changed.
    assert_eq!(manager.settings(None).rate, 1);
}

#[test]
fn a_missing_trace_folder_is_refused_at_start() {
    let error = TraceManager::new(
        &options(std::path::Path::new("/nonexistent-folder/t.json"), 1, -1, 0),
        None,
    )
    .err()
    .expect("refused");
    assert!(error
        .message()
        .contains("folder '/nonexistent-folder' does not exist"));
}

#[test]
fn tensor_data_is_formatted_as_tritons_tracer() {
    assert_eq!(format_g(1.0), "1");
    assert_eq!(format_g(4.5), "4.5");
    assert_eq!(format_g(0.1f32 as f64), "0.1");
    assert_eq!(format_g(1234567.0), "1.23457e+06");
    assert_eq!(format_g(0.0001), "0.0001");
    assert_eq!(format_g(0.00001), "1e-05");
    assert_eq!(format_g(-0.0), "-0");
    assert_eq!(format_g(f64::INFINITY), "inf");
    let bytes: Vec<u8> = [3i32, -4].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(format_data(DataType::Int32, &bytes), "3,-4");
    assert_eq!(format_data(DataType::Bool, &[0, 1, 2]), "0,1,1");
    assert_eq!(format_data(DataType::Uint8, &[7, 255]), "7,255");
    let mut strings = Vec::new();
    for s in ["ab", "c"] {
        strings.extend((s.len() as u32).to_le_bytes());
        strings.extend(s.as_bytes());
    }
    assert_eq!(format_data(DataType::Bytes, &strings), "\"ab\",\"c\"");
}

#[test]
fn a_trace_with_no_records_leaves_the_file_valid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.json");
    let mut opts = options(&file, 1, -1, 0);
    // TENSORS alone: a request without tensors records nothing.
    opts.level = TraceLevel {
        timestamps: false,
        tensors: true,
    };
    let manager = TraceManager::new(&opts, None).expect("valid");
    drop(manager.sample("m").expect("sampled"));
    let trace = manager.sample("m").expect("sampled");
    trace.tensor(
        TensorActivity::QueueInput,
        "IN",
        DataType::Int32,
        &[1],
        &[1, 0, 0, 0],
    );
    drop(trace);
    manager.flush();
    assert_eq!(read(&file).as_array().map(Vec::len), Some(1));
}

/// A sink keeping what it is given, and reading `traceparent` as `trace-span` in hex.
#[derive(Default)]
struct KeptSpans(parking_lot::Mutex<Vec<FinishedTrace>>);

impl SpanSink for KeptSpans {
    fn extract(&self, header: &dyn Fn(&str) -> Option<String>) -> Option<RemoteParent> {
        let value = header("traceparent")?;
        let (trace, span) = value.split_once('-')?;
        Some(RemoteParent {
            trace_id: u128::from_str_radix(trace, 16).ok()?.to_be_bytes(),
            span_id: u64::from_str_radix(span, 16).ok()?.to_be_bytes(),
            flags: 1,
            trace_state: String::new(),
        })
    }
    fn submit(&self, trace: FinishedTrace) {
        self.0.lock().push(trace);
    }
    fn shutdown(&self) {}
}

fn otel_manager(rate: u32) -> (TraceManager, Arc<KeptSpans>) {
    let sink = Arc::new(KeptSpans::default());
    let options = TraceOptions {
        level: TraceLevel {
            timestamps: true,
            tensors: true,
        },
        rate,
        mode: TraceMode::OpenTelemetry,
        mode_settings: vec![("url".into(), "localhost:4318/v1/traces".into())],
        ..TraceOptions::default()
    };
    let manager = TraceManager::new(&options, Some(sink.clone())).expect("valid");
    (manager, sink)
}

#[test]
fn opentelemetry_mode_needs_a_sink_and_lists_its_settings() {
    let options = TraceOptions {
        mode: TraceMode::OpenTelemetry,
        ..TraceOptions::default()
    };
    let refused = TraceManager::new(&options, None).err().expect("refused");
    assert_eq!(refused.kind(), crate::error::ErrorKind::Unsupported);
    let (manager, _) = otel_manager(1);
    let view = manager.settings(None);
    let names: Vec<&str> = view.entries().iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        ["trace_level", "trace_rate", "trace_count", "trace_mode"]
    );
    assert_eq!(
        view.mode_entries().collect::<Vec<_>>(),
        [("url", "localhost:4318/v1/traces")]
    );
}

#[test]
fn opentelemetry_spans_nest_as_tritons() {
    let (manager, sink) = otel_manager(1);
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let trace = manager.sample("ens").expect("sampled");
    trace.timestamp("HTTP_RECV_START", at(0));
    trace.request_start("ens", 1, "req-7", at(1));
    trace.timestamp("QUEUE_START", at(2));
    let step = trace.child();
    step.request_start("add", 2, "", at(3));
    step.timestamp("QUEUE_START", at(4));
    step.timestamp("COMPUTE_START", at(5));
    step.tensor(
        TensorActivity::BackendInput,
        "IN",
        DataType::Int32,
        &[1],
        &[1, 0, 0, 0],
    );
    step.timestamp("COMPUTE_INPUT_END", at(6));
    step.timestamp("COMPUTE_OUTPUT_START", at(7));
    step.timestamp("COMPUTE_END", at(8));
    step.timestamp("REQUEST_END", at(9));
    trace.timestamp("REQUEST_END", at(10));
    trace.timestamp("HTTP_SEND_START", at(11));
    assert!(
        !step.traces_tensors(),
        "no tensors in the opentelemetry mode"
    );
    drop(step);
    assert!(
        sink.0.lock().is_empty(),
        "exported when the last holder lets go"
    );
    drop(trace);

    let traces = sink.0.lock();
    let spans = &traces[0].spans;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["InferRequest", "ens", "add", "compute"]);
    let parents: Vec<Option<usize>> = spans.iter().map(|s| s.parent).collect();
    assert_eq!(parents, [None, Some(0), Some(1), Some(2)]);
    let events =
        |i: usize| -> Vec<&str> { spans[i].events.iter().map(|(n, _)| n.as_str()).collect() };
    assert_eq!(events(0), ["HTTP_RECV_START", "HTTP_SEND_START"]);
    assert_eq!(events(1), ["REQUEST_START", "QUEUE_START", "REQUEST_END"]);
    assert_eq!(events(2), ["REQUEST_START", "QUEUE_START", "REQUEST_END"]);
    assert_eq!(
        events(3),
        [
            "COMPUTE_START",
            "COMPUTE_INPUT_END",
            "COMPUTE_OUTPUT_START",
            "COMPUTE_END"
        ]
    );
    let wall = |ms: u64| manager.clock.wall(at(ms));
    assert_eq!((spans[3].start, spans[3].end), (wall(5), wall(8)));
    assert_eq!((spans[2].start, spans[2].end), (wall(3), wall(9)));
    assert_eq!((spans[1].start, spans[1].end), (wall(1), wall(10)));
    assert_eq!(spans[0].events[1].1, wall(11));
    assert!(spans[1]
        .attributes
        .contains(&("triton.request_id", AttributeValue::Str("req-7".into()))));
    assert!(spans[2].attributes.contains(&(
        "triton.trace_parent_id",
        AttributeValue::Int(spans_id(&spans[1]))
    )));
}

fn spans_id(span: &FinishedSpan) -> i64 {
    span.attributes
        .iter()
        .find_map(|(name, value)| match (name, value) {
            (&"triton.trace_id", AttributeValue::Int(id)) => Some(*id),
            _ => None,
        })
        .expect("a model span has its trace id")
}

#[test]
fn a_propagated_context_forces_sampling() {
    // Rate 0: only requests with a client's context are traced (Triton's workaround).
    let (manager, sink) = otel_manager(0);
    assert!(manager.sample("m").is_none());
    let parent = "000000000000000000000000000000ab-00000000000000cd";
    let header = |name: &str| (name == "traceparent").then(|| parent.to_string());
    drop(manager.sample_propagated("m", &header).expect("forced"));
    let traces = sink.0.lock();
    let remote = traces[0].remote_parent.as_ref().expect("continued");
    assert_eq!(remote.trace_id[15], 0xab);
    assert_eq!(remote.span_id[7], 0xcd);

    // With a rate, forced requests still count towards it.
    let (manager, _) = otel_manager(2);
    assert!(manager.sample_propagated("m", &header).is_some());
    assert!(
        manager.sample("m").is_some(),
        "the 2nd request hits the rate"
    );
    assert!(manager.sample("m").is_none());
}
