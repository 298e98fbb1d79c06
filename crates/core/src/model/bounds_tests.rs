//! The bounds on configuration sizes: each absurd value fails the load with a message
//! naming the field, the value and the limit; values at the limit still load.

use super::*;
use crate::testing;

/// The spec of model `m` built from `config.pbtxt` text, or the load error.
fn build(text: &str) -> Result<ModelSpec> {
    ModelSpec::new(testing::config("m", text), 1)
}

/// The load error of `text`'s spec.
fn refused(text: &str) -> String {
    build(text).expect_err("over a limit").message().to_string()
}

const IO: &str = r#"backend: "identity"
    input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]"#;

fn with(extra: &str) -> String {
    format!("{IO}\n{extra}")
}

#[test]
fn max_batch_size_is_bounded() {
    assert_eq!(
        refused(&with("max_batch_size: 2000000000")),
        "model 'm': max_batch_size 2000000000 exceeds the limit of 1048576"
    );
    build(&with(&format!("max_batch_size: {MAX_BATCH_SIZE}"))).expect("at the limit");
}

#[test]
fn instances_are_bounded_across_groups() {
    assert_eq!(
        refused(&with("instance_group [ { kind: KIND_CPU count: 2000 } ]")),
        "model 'm': instance_group count (all groups together) 2000 exceeds the limit of 256"
    );
    let two = |a: usize, b: usize| {
        with(&format!(
            "instance_group [ {{ kind: KIND_CPU count: {a} }}, {{ kind: KIND_CPU count: {b} }} ]"
        ))
    };
    assert!(refused(&two(200, 100)).contains("300 exceeds the limit of 256"));
    let spec = build(&two(200, 56)).expect("256 in all");
    assert_eq!(spec.instance_groups.len(), 2);
}

#[test]
fn candidate_sequences_and_slots_are_bounded() {
    let oldest = |candidates: u64, instances: u32| {
        with(&format!(
            "max_batch_size: 4
             instance_group [ {{ kind: KIND_CPU count: {instances} }} ]
             sequence_batching {{ oldest {{ max_candidate_sequences: {candidates} }} }}"
        ))
    };
    assert_eq!(
        refused(&oldest(2_000_000_000, 1)),
        "model 'm': sequence_batching.oldest.max_candidate_sequences 2000000000 exceeds the limit of 1048576"
    );
    build(&oldest(1 << 20, 1)).expect("at the limit");
    assert_eq!(
        refused(&oldest(1 << 20, 2)),
        "model 'm': sequence slots (sequence_batching.oldest.max_candidate_sequences × instances) 1048576 × 2 = 2097152 exceeds the limit of 1048576"
    );
    let direct = with(
        "max_batch_size: 1048576
         instance_group [ { kind: KIND_CPU count: 2 } ]
         sequence_batching { }",
    );
    assert!(refused(&direct).contains("sequence slots (max_batch_size × instances)"));
}

#[test]
fn any_number_of_priority_levels_loads() {
    // Triton's L0_model_queue loads u64::MAX levels: a level costs nothing until used.
    let spec = build(&with(
        "dynamic_batching { priority_levels: 18446744073709551615 default_priority_level: 18446744073709551615 }",
    ))
    .expect("loads");
    let batching = match &spec.scheduling {
        crate::model::SchedulingSpec::Dynamic(d) => d,
        other => panic!("dynamic batching expected, got {other:?}"),
    };
    assert_eq!(batching.level_of(Some(u64::MAX - 1)), u64::MAX - 1);
    assert_eq!(batching.level_of(None), u64::MAX);
}

#[test]
fn state_sizes_are_bounded_without_overflow() {
    let state = |dims: &str, initial: &str| {
        with(&format!(
            r#"sequence_batching {{ state [ {{ input_name: "S_IN" output_name: "S_OUT"
               data_type: TYPE_INT32 dims: [ {dims} ] {initial} }} ] }}"#
        ))
    };
    assert_eq!(
        refused(&state("100000, 100000", "")),
        "model 'm': sequence_batching.state[0].dims [100000, 100000] (40000000000 bytes of INT32) exceeds the limit of 1073741824 bytes"
    );
    let initial = r#"initial_state { name: "i" data_type: TYPE_INT32 dims: [ 9223372036854775807, 4 ] zero_data: true }"#;
    assert!(
        refused(&state("-1, 4", initial)).contains(
            "sequence_batching.state[0].initial_state.dims [9223372036854775807, 4] (more than 2^64 bytes of INT32)"
        ),
        "overflow is reported, not wrapped"
    );
    // Variable dims read as 1: the initial value is small.
    let spec = build(&state("-1, 268435456", "")).expect("exactly 1 GiB");
    let states = &spec.scheduling.sequence().expect("sequence").states;
    assert_eq!(states[0].initial_bytes, MAX_STATE_BYTES);
}
