//! The control tensors' bytes: START, END and READY in each of the three value types,
//! CORRID in every allowed type, and what a padding request gets.

use std::sync::Arc;

use super::*;
use crate::model::ModelSpec;
use crate::testing;

/// The spec of a model configured with `controls` (the `control_input` entries).
fn spec(max_batch_size: u32, controls: &str) -> Arc<ModelSpec> {
    testing::sequence_spec(max_batch_size, &format!("control_input [ {controls} ]"))
}

/// The controls of a model configured with `controls`.
fn controls(max_batch_size: u32, controls: &str) -> Controls {
    let spec = spec(max_batch_size, controls);
    let sequence = spec
        .scheduling
        .sequence()
        .expect("the config has sequence_batching");
    Controls::new(sequence.controls.clone(), spec.max_batch_size > 0)
}

fn switch(name: &str, kind: &str, values: &str) -> String {
    format!(r#"{{ name: "{name}" control [ {{ kind: {kind} {values} }} ] }}"#)
}

fn corrid(data_type: &str) -> String {
    format!(
        r#"{{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {data_type} }} ] }}"#
    )
}

fn flags(id: SequenceId, start: bool, end: bool) -> SequenceFlags {
    SequenceFlags { id, start, end }
}

/// `(name, datatype, shape, bytes)` of each tensor.
fn tensors(c: &Controls, f: Option<&SequenceFlags>) -> Vec<(String, DataType, Vec<i64>, Vec<u8>)> {
    c.tensors(f)
        .into_iter()
        .map(|t| (t.name, t.datatype, t.shape, t.data.to_vec()))
        .collect()
}

/// START in int32, END in fp32 and READY in bool, with values that are not plain 0 / 1 so
/// the false/true order shows.
fn three_types(max_batch_size: u32) -> Controls {
    controls(max_batch_size, &three_types_text())
}

fn three_types_text() -> String {
    let list = [
        switch(
            "START",
            "CONTROL_SEQUENCE_START",
            "int32_false_true: [ 5, 9 ]",
        ),
        switch(
            "END",
            "CONTROL_SEQUENCE_END",
            "fp32_false_true: [ -1.5, 2.5 ]",
        ),
        switch(
            "READY",
            "CONTROL_SEQUENCE_READY",
            "bool_false_true: [ false, true ]",
        ),
    ];
    list.join(", ")
}

#[test]
fn switches_carry_their_false_and_true_bytes_in_each_type() {
    let c = three_types(4);
    let i32s = |v: i32| v.to_le_bytes().to_vec();
    let f32s = |v: f32| v.to_le_bytes().to_vec();
    let start = flags(SequenceId::Number(3), true, false);
    assert_eq!(
        tensors(&c, Some(&start)),
        vec![
            ("START".into(), DataType::Int32, vec![1, 1], i32s(9)),
            ("END".into(), DataType::Fp32, vec![1, 1], f32s(-1.5)),
            ("READY".into(), DataType::Bool, vec![1, 1], vec![1]),
        ]
    );
    let end = flags(SequenceId::Number(3), false, true);
    let got = tensors(&c, Some(&end));
    assert_eq!((got[0].3.clone(), got[1].3.clone()), (i32s(5), f32s(2.5)));
    // A padding request: every switch false, READY included.
    let padding = tensors(&c, None);
    assert_eq!(
        padding.iter().map(|t| t.3.clone()).collect::<Vec<_>>(),
        vec![i32s(5), f32s(-1.5), vec![0]]
    );
    // Without batching the tensors have no batch dimension.
    let unbatched = three_types(0);
    assert!(tensors(&unbatched, Some(&start))
        .iter()
        .all(|t| t.2 == vec![1]));
    // The spec lists them as internal inputs, for the backend.
    let specs: Vec<(String, DataType, Vec<i64>)> = spec(4, &three_types_text())
        .internal_inputs
        .clone()
        .into_iter()
        .map(|t| (t.name, t.datatype, t.dims))
        .collect();
    assert_eq!(
        specs,
        vec![
            ("START".into(), DataType::Int32, vec![1]),
            ("END".into(), DataType::Fp32, vec![1]),
            ("READY".into(), DataType::Bool, vec![1]),
        ]
    );
}

/// A CORRID type: config spelling, datatype, and the bytes for a numeric ID, a string ID
/// and a padding request.
type Case = (&'static str, DataType, Vec<u8>, Vec<u8>, Vec<u8>);

#[test]
fn corrid_bytes_in_every_type() {
    let big = SequenceId::Number(0x1_0000_0002);
    let text = SequenceId::Text("abc".into());
    let hash = xxhash_rust::xxh3::xxh3_64(b"abc");
    let string = |s: &str| {
        let mut b = (s.len() as u32).to_le_bytes().to_vec();
        b.extend_from_slice(s.as_bytes());
        b
    };
    let cases: [Case; 5] = [
        (
            "TYPE_UINT64",
            DataType::Uint64,
            0x1_0000_0002u64.to_le_bytes().to_vec(),
            hash.to_le_bytes().to_vec(),
            vec![0; 8],
        ),
        (
            "TYPE_INT64",
            DataType::Int64,
            0x1_0000_0002u64.to_le_bytes().to_vec(),
            hash.to_le_bytes().to_vec(),
            vec![0; 8],
        ),
        // 32-bit types take the low half.
        (
            "TYPE_UINT32",
            DataType::Uint32,
            2u32.to_le_bytes().to_vec(),
            (hash as u32).to_le_bytes().to_vec(),
            vec![0; 4],
        ),
        (
            "TYPE_INT32",
            DataType::Int32,
            2u32.to_le_bytes().to_vec(),
            (hash as u32).to_le_bytes().to_vec(),
            vec![0; 4],
        ),
        (
            "TYPE_STRING",
            DataType::Bytes,
            string("4294967298"),
            string("abc"),
            string(""),
        ),
    ];
    for (config_type, datatype, number, text_bytes, padding) in cases {
        let c = controls(4, &corrid(config_type));
        let one = |f: Option<&SequenceFlags>| {
            let t = tensors(&c, f);
            assert_eq!(t.len(), 1, "{config_type}: CORRID only");
            assert_eq!((t[0].0.as_str(), t[0].1), ("CORRID", datatype));
            assert_eq!(t[0].2, vec![1, 1]);
            t[0].3.clone()
        };
        assert_eq!(
            one(Some(&flags(big.clone(), true, false))),
            number,
            "{config_type}"
        );
        assert_eq!(
            one(Some(&flags(text.clone(), false, false))),
            text_bytes,
            "{config_type}"
        );
        assert_eq!(one(None), padding, "{config_type}: padding");
    }
}
