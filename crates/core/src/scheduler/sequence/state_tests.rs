//! Implicit state: handed from one request of a sequence to the next, reset at START,
//! dropped at END, kept when a request fails, and never overwritten by a request of an
//! older START of the same correlation ID.

use std::path::Path;

use super::*;
use crate::testing::{self, int32_bytes};

/// The states of a model whose `state` entries are `states`.
fn states(max_batch_size: u32, states: &str, model_dir: Option<&Path>) -> States {
    let spec = testing::sequence_spec(max_batch_size, &format!("state [ {states} ]"));
    let sequence = spec
        .scheduling
        .sequence()
        .expect("the config has sequence_batching");
    States::new(&sequence.states, model_dir, spec.max_batch_size > 0).expect("valid states")
}

const INT32_PAIR: &str =
    r#"{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 2 ] }"#;

fn flags(id: u64, start: bool, end: bool) -> SequenceFlags {
    SequenceFlags {
        id: SequenceId::Number(id),
        start,
        end,
    }
}

/// The state input a request with `f` gets: `(shape, values)`, and its ticket.
fn state_in(s: &States, f: Option<&SequenceFlags>) -> ((Vec<i64>, Vec<i32>), Option<StateTicket>) {
    let (inputs, ticket) = s.inputs(f);
    assert_eq!(inputs.len(), 1);
    assert_eq!(
        (inputs[0].name.as_str(), inputs[0].datatype),
        ("STATE_IN", DataType::Int32)
    );
    let values = testing::int32s(&inputs[0].data);
    ((inputs[0].shape.clone(), values), ticket)
}

/// A request's outputs: `OUT` and the new state `values`.
fn outputs(values: &[i32]) -> Vec<OutputTensor> {
    let tensor = |name: &str, data| OutputTensor {
        name: name.into(),
        datatype: DataType::Int32,
        shape: vec![1, 2],
        data,
        device: None,
    };
    vec![
        tensor("OUT", int32_bytes(&[7, 7])),
        tensor("STATE_OUT", int32_bytes(values)),
    ]
}

/// Runs one request of sequence `id` that produces state `values`; returns the state it got.
fn step(s: &States, f: &SequenceFlags, values: &[i32]) -> Vec<i32> {
    let ((_, got), ticket) = state_in(s, Some(f));
    let mut out = outputs(values);
    s.keep(&ticket.expect("a sequence request has a ticket"), &mut out);
    assert_eq!(out.len(), 1, "the state output is taken out");
    assert_eq!(out[0].name, "OUT");
    got
}

#[test]
fn state_goes_to_the_next_request_and_resets_at_start_and_end() {
    let s = states(4, INT32_PAIR, None);
    let ((shape, first), _) = state_in(&s, Some(&flags(1, true, false)));
    assert_eq!(
        (shape, first),
        (vec![1, 2], vec![0, 0]),
        "initial state: zeros"
    );
    assert_eq!(step(&s, &flags(1, true, false), &[1, 2]), vec![0, 0]);
    assert_eq!(step(&s, &flags(1, false, false), &[3, 4]), vec![1, 2]);
    // Another sequence has its own state.
    assert_eq!(step(&s, &flags(2, true, false), &[9, 9]), vec![0, 0]);
    assert_eq!(step(&s, &flags(1, false, false), &[5, 6]), vec![3, 4]);
    // START resets a stored state.
    assert_eq!(step(&s, &flags(1, true, false), &[7, 8]), vec![0, 0]);
    assert_eq!(step(&s, &flags(1, false, true), &[0, 1]), vec![7, 8]);
    // END dropped it: the next request starts from the initial state.
    assert_eq!(step(&s, &flags(1, false, false), &[0, 1]), vec![0, 0]);
    // Released idle: dropped too.
    s.forget(&SequenceId::Number(2));
    assert_eq!(step(&s, &flags(2, false, false), &[0, 0]), vec![0, 0]);
}

#[test]
fn a_failed_request_keeps_the_previous_state() {
    let s = states(4, INT32_PAIR, None);
    step(&s, &flags(1, true, false), &[1, 2]);
    // This request fails: its ticket is never used.
    let ((_, got), _ticket) = state_in(&s, Some(&flags(1, false, false)));
    assert_eq!(got, vec![1, 2]);
    assert_eq!(step(&s, &flags(1, false, false), &[3, 4]), vec![1, 2]);
    // A model that returns no state output drops the state.
    let (_, ticket) = state_in(&s, Some(&flags(1, false, false)));
    let mut without_state = outputs(&[5, 6]);
    without_state.pop();
    s.keep(&ticket.expect("ticket"), &mut without_state);
    assert_eq!(step(&s, &flags(1, false, false), &[0, 0]), vec![0, 0]);
}

#[test]
fn a_stale_generation_is_ignored() {
    let s = states(4, INT32_PAIR, None);
    step(&s, &flags(1, true, false), &[1, 2]);
    // A request of the first START is still executing when the ID starts again.
    let (_, old) = state_in(&s, Some(&flags(1, false, false)));
    let (_, new) = state_in(&s, Some(&flags(1, true, false)));
    s.keep(&new.expect("ticket"), &mut outputs(&[5, 5]));
    s.keep(&old.expect("ticket"), &mut outputs(&[6, 6]));
    assert_eq!(step(&s, &flags(1, false, false), &[0, 0]), vec![5, 5]);
    // An old END does not drop the new sequence's state either.
    let (_, old_end) = state_in(&s, Some(&flags(1, false, true)));
    let (_, restart) = state_in(&s, Some(&flags(1, true, false)));
    s.keep(&restart.expect("ticket"), &mut outputs(&[8, 8]));
    s.keep(&old_end.expect("ticket"), &mut outputs(&[0, 0]));
    assert_eq!(step(&s, &flags(1, false, false), &[0, 0]), vec![8, 8]);
}

#[test]
fn padding_gets_the_initial_state_and_stores_nothing() {
    let s = states(0, INT32_PAIR, None);
    let ((shape, values), ticket) = state_in(&s, None);
    assert_eq!((shape, values), (vec![2], vec![0, 0]), "no batch dimension");
    assert!(ticket.is_none());
    assert!(states(4, "", None)
        .inputs(Some(&flags(1, true, false)))
        .0
        .is_empty());
}

#[test]
fn initial_state_from_zero_data_or_a_data_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("initial_state")).expect("mkdir");
    let file: Vec<u8> = [4i32, -4, 99]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(dir.path().join("initial_state/init.bin"), file).expect("write");
    let with_initial = |data: &str| {
        format!(
            r#"{{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32
                 dims: [ -1 ]
                 initial_state {{ name: "init" data_type: TYPE_INT32 dims: [ 2 ] {data} }} }}"#
        )
    };
    let zeros = states(4, &with_initial("zero_data: true"), Some(dir.path()));
    assert_eq!(
        state_in(&zeros, Some(&flags(1, true, false))).0,
        (vec![1, 2], vec![0, 0])
    );
    let from_file = states(
        4,
        &with_initial(r#"data_file: "init.bin""#),
        Some(dir.path()),
    );
    // The file's first 2 elements (it may be longer).
    assert_eq!(
        state_in(&from_file, Some(&flags(1, true, false))).0,
        (vec![1, 2], vec![4, -4])
    );
    // With variable dims and no initial_state, -1 reads as 1.
    let variable = r#"{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ -1, 3 ] }"#;
    let s = states(0, variable, None);
    assert_eq!(state_in(&s, None).0, (vec![1, 3], vec![0, 0, 0]));
}

#[test]
fn an_endless_data_file_is_read_only_as_far_as_the_state_needs() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("initial_state")).expect("mkdir");
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("initial_state/zero.bin"))
        .expect("link");
    let state = r#"{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32
        dims: [ 3 ]
        initial_state { name: "init" data_type: TYPE_INT32 dims: [ 3 ] data_file: "zero.bin" } }"#;
    let s = states(0, state, Some(dir.path()));
    assert_eq!(state_in(&s, None).0, (vec![3], vec![0, 0, 0]));
}
