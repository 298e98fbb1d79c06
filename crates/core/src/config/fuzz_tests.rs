//! Fuzzing of the configuration path a model load takes: `config.pbtxt` text (the real
//! configs of `examples/models` and the shapes the tests use, mutated) and the JSON of a
//! repository `load` override, through parsing, normalization and validation, the typed
//! [`ModelSpec`] or ensemble [`Plan`], and the JSON the `/config` endpoint prints. Every
//! rejection must be an [`Error`] of a client kind, never a panic or an `Internal` error,
//! and every accepted configuration must print JSON that parses back to itself.
//! `NEREID_FUZZ_ITERATIONS` sets the iteration count (see docs/src/development.md, "Fuzzing").

use std::path::Path;

use super::{
    config_from_json, config_to_json, is_ensemble, normalize_and_validate, parse_model_config,
    ModelConfig, NormalizeOptions,
};
use crate::ensemble::graph::Plan;
use crate::error::{Error, ErrorKind};
use crate::model::ModelSpec;
use crate::testing::fuzz::{self, Rng, TrackingAllocator};

#[global_allocator]
static ALLOCATOR: TrackingAllocator = TrackingAllocator;

/// Iterations of each target in the test command (under a second each in release mode).
const SHORT_RUN: u64 = 20_000;

/// The largest mutated configuration; real ones are under 2 KiB.
const MAX_LEN: usize = 16 << 10;

/// Every `config.pbtxt` under `examples/models`.
const EXAMPLES: &[&str] = &[
    include_str!("../../../../examples/models/accumulate_fp32/config.pbtxt"),
    include_str!("../../../../examples/models/add_sub/config.pbtxt"),
    include_str!("../../../../examples/models/ensemble_add_sub/config.pbtxt"),
    include_str!("../../../../examples/models/ensemble_diamond/config.pbtxt"),
    include_str!("../../../../examples/models/identity_bf16/config.pbtxt"),
    include_str!("../../../../examples/models/identity_string/config.pbtxt"),
    include_str!("../../../../examples/models/identity_uint64/config.pbtxt"),
    include_str!("../../../../examples/models/mlp/config.pbtxt"),
    include_str!("../../../../examples/models/sequence_accumulate/config.pbtxt"),
];

/// Sections the examples lack, in the forms the unit and Python tests write them.
const SHAPES: &[&str] = &[
    r#"name: "m" backend: "identity" max_batch_size: 8
       input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1, 2 ] optional: true allow_ragged_batch: true } ]
       output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1, 2 ] } ]
       dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100
         preserve_ordering: false priority_levels: 3 default_priority_level: 2
         default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 allow_timeout_override: true max_queue_size: 4 }
         priority_queue_policy { key: 1 value { timeout_action: REJECT max_queue_size: 2 } } }
       response_cache { enable: true }
       version_policy { specific { versions: [ 1, 3 ] } }"#,
    r#"backend: "identity" max_batch_size: 2
       input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
       output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
       sequence_batching { max_sequence_idle_microseconds: 1000
         direct { max_queue_delay_microseconds: 10 minimum_slot_utilization: 0.5 }
         control_input [
           { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
           { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]
         state [ { input_name: "SI" output_name: "SO" data_type: TYPE_INT32 dims: [ -1 ]
           initial_state [ { name: "init" data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } ] } ] }
       instance_group [ { name: "g" kind: KIND_CPU count: 2 }, { kind: KIND_MODEL passive: true } ]
       model_transaction_policy { decoupled: false }"#,
    r#"platform: "ensemble" max_batch_size: 4
       input [ { name: "A" data_type: TYPE_STRING dims: [ 1 ] } ]
       output [ { name: "Z" data_type: TYPE_STRING dims: [ 1 ] } ]
       ensemble_scheduling { step [
         { model_name: "x" model_version: -1 input_map { key: "I" value: "A" } output_map { key: "O" value: "t" } },
         { model_name: "y" model_version: 2 input_map { key: "I" value: "t" } output_map { key: "O" value: "Z" } } ] }"#,
    r#"backend: "onnxruntime" default_model_filename: "m.onnx"
       optimization { graph { level: 1 } execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }
       parameters { key: "intra_op_thread_count" value { string_value: "2" } }
       model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
       version_policy { latest { num_versions: 2 } }"#,
    r#"platform: "onnxruntime_onnx" max_batch_size: 4
       input [ { name: "data_0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, -1, 4 ] reshape { shape: [ 1, 3, -1, 2, 2 ] } },
               { name: "s" data_type: TYPE_INT64 dims: [ 1 ] reshape { shape: [ ] } } ]
       output [ { name: "fc6_1" data_type: TYPE_FP32 dims: [ 1000 ] reshape { shape: [ 1, 1000, 1, 1 ] } label_filename: "labels.txt" } ]"#,
];

fn seeds() -> Vec<&'static str> {
    EXAMPLES.iter().chain(SHAPES).copied().collect()
}

/// Field and enum value names of every message the build compiled: the vocabulary
/// mutations splice in, so that mutated configs reach deep into the schema.
fn vocabulary() -> Vec<&'static str> {
    let pool = nereid_proto::descriptor_pool();
    let mut words: Vec<String> = pool
        .all_messages()
        .flat_map(|m| {
            m.fields()
                .map(|f| format!(" {}: ", f.name()))
                .collect::<Vec<_>>()
        })
        .chain(pool.all_enums().flat_map(|e| {
            e.values()
                .map(|v| format!(" {} ", v.name()))
                .collect::<Vec<_>>()
        }))
        .collect();
    words.sort();
    words.dedup();
    words
        .into_iter()
        .map(|w| &*Box::leak(w.into_boxed_str()))
        .collect()
}

/// A configuration error must be a client error with a message.
fn assert_rejection(stage: &str, input: &str, e: &Error) {
    assert!(
        e.kind() != ErrorKind::Internal && !e.message().is_empty(),
        "{stage} answered {:?} {:?} for:\n{input}",
        e.kind(),
        e.message()
    );
}

/// What a load does with a parsed configuration, checked as described in the module doc.
fn check_parsed(mut config: ModelConfig, input: &str, rng: &mut Rng) {
    let name = if config.name.is_empty() || rng.one_in(8) {
        "m".to_string()
    } else {
        config.name.clone()
    };
    let options = NormalizeOptions {
        gpu_count: rng.below(2),
        gpu_instances_on_cpu: rng.one_in(2),
    };
    if let Err(e) = normalize_and_validate(&mut config, &name, options) {
        return assert_rejection("normalize_and_validate", input, &e);
    }
    let json = config_to_json(&config).to_string();
    let back = config_from_json(&json)
        .unwrap_or_else(|e| panic!("printed config does not parse back ({e}): {json}"));
    assert_eq!(
        back, config,
        "printed config changes on the way back: {json}"
    );
    let built = if is_ensemble(&config) {
        Plan::new(&config).map(drop)
    } else {
        ModelSpec::new(config, 1).map(drop)
    };
    if let Err(e) = built {
        assert_rejection("building the spec", input, &e);
    }
}

#[test]
fn mutated_pbtxt_configs_never_panic() {
    let seeds = seeds();
    let others: Vec<&[u8]> = seeds.iter().map(|s| s.as_bytes()).collect();
    let vocabulary = vocabulary();
    for seed in &seeds {
        let config = parse_model_config(Path::new("config.pbtxt"), seed).expect("seeds parse");
        check_parsed(config, seed, &mut Rng::new(0));
    }
    let generate = |rng: &mut Rng| {
        let mut bytes = rng.pick(&seeds).as_bytes().to_vec();
        fuzz::mutate(rng, &mut bytes, &others, &vocabulary, MAX_LEN);
        String::from_utf8_lossy(&bytes).into_owned()
    };
    fuzz::run(
        "config.pbtxt",
        SHORT_RUN,
        generate,
        |text, rng| match parse_model_config(Path::new("config.pbtxt"), text) {
            Ok(config) => check_parsed(config, text, rng),
            Err(e) => assert_rejection("parse_model_config", text, &e),
        },
    );
}

#[test]
fn mutated_json_configs_never_panic() {
    let seeds: Vec<String> = seeds()
        .iter()
        .map(|text| {
            let config = parse_model_config(Path::new("config.pbtxt"), text).expect("seeds parse");
            config_to_json(&config).to_string()
        })
        .collect();
    let others: Vec<&[u8]> = seeds.iter().map(|s| s.as_bytes()).collect();
    let vocabulary: Vec<String> = vocabulary()
        .iter()
        .map(|w| format!("\"{}\"", w.trim().trim_end_matches(':')))
        .collect();
    let vocabulary: Vec<&str> = vocabulary.iter().map(String::as_str).collect();
    let generate = |rng: &mut Rng| {
        let mut bytes = rng.pick(&seeds).as_bytes().to_vec();
        fuzz::mutate(rng, &mut bytes, &others, &vocabulary, MAX_LEN);
        String::from_utf8_lossy(&bytes).into_owned()
    };
    fuzz::run(
        "config JSON",
        SHORT_RUN,
        generate,
        |text, rng| match config_from_json(text) {
            Ok(config) => check_parsed(config, text, rng),
            Err(e) => assert_rejection("config_from_json", text, &e),
        },
    );
}
