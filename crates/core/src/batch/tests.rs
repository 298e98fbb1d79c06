//! Gather and scatter of `BYTES` tensors: requests with different row counts and string
//! lengths share a batch and each gets exactly its own rows back.

use bytes::Bytes;

use super::*;
use crate::request::{join_bytes_elements, InputTensor};
use crate::testing;

/// A batching model with one `BYTES` input and output of two strings per row.
fn spec() -> std::sync::Arc<ModelSpec> {
    testing::spec(
        "strings",
        r#"backend: "identity" max_batch_size: 8
           input [ { name: "IN" data_type: TYPE_STRING dims: [ 2 ] } ]
           output [ { name: "OUT" data_type: TYPE_STRING dims: [ 2 ] } ]"#,
    )
}

/// A request of `rows` rows of two strings each, from `strings` in row order.
fn request(id: &str, strings: &[&str]) -> InferRequest {
    let data = join_bytes_elements(strings.iter().map(|s| s.as_bytes()));
    testing::request(
        "strings",
        id,
        vec![InputTensor {
            name: "IN".into(),
            datatype: DataType::Bytes,
            shape: vec![strings.len() as i64 / 2, 2],
            data: Bytes::from(data),
            device: None,
        }],
    )
}

#[test]
fn bytes_rows_of_different_lengths_scatter_back_to_their_requests() {
    let spec = spec();
    // 1, 3 and 2 rows; empty, one-byte, multi-byte and long strings, also at row edges.
    let requests = [
        request("a", &["", "x"]),
        request("b", &["longer string", "", "é", "zz", "", ""]),
        request("c", &["q", "a much longer string than the others", "r", ""]),
    ];
    let batch = Batch::new(&spec, requests.iter().collect(), vec![1, 3, 2]);
    assert_eq!(batch.total_batch_size(), 6);
    let gathered = batch.gather_input("IN").expect("gathers").expect("present");
    assert_eq!(gathered.shape, vec![6, 2]);
    let all: Vec<u8> = requests
        .iter()
        .flat_map(|r| r.inputs[0].data.to_vec())
        .collect();
    assert_eq!(&gathered.data[..], &all[..]);

    let answers = batch.scatter(vec![OutputTensor {
        name: "OUT".into(),
        datatype: DataType::Bytes,
        shape: gathered.shape,
        data: gathered.data,
        device: None,
    }]);
    assert_eq!(answers.len(), 3);
    for (answer, request) in answers.into_iter().zip(&requests) {
        let outputs = answer.expect("scattered");
        assert_eq!(outputs.len(), 1);
        assert_eq!(outputs[0].name, "OUT");
        assert_eq!(outputs[0].shape, request.inputs[0].shape);
        assert_eq!(
            outputs[0].data, request.inputs[0].data,
            "request {}",
            request.id
        );
    }
}

#[test]
fn a_single_request_is_neither_copied_nor_split() {
    let spec = spec();
    let only = request("a", &["one", "two", "three", ""]);
    let batch = Batch::new(&spec, vec![&only], vec![2]);
    let gathered = batch.gather_input("IN").expect("gathers").expect("present");
    assert_eq!(gathered.data.as_ptr(), only.inputs[0].data.as_ptr());
    let output = OutputTensor {
        name: "OUT".into(),
        datatype: DataType::Bytes,
        shape: gathered.shape,
        data: gathered.data,
        device: None,
    };
    let answers = batch.scatter(vec![output.clone()]);
    assert_eq!(answers[0].as_ref().expect("ok"), &vec![output]);
}

#[test]
fn a_wrong_batch_dimension_fails_every_request() {
    let spec = spec();
    let requests = [request("a", &["x", "y"]), request("b", &["z", "w"])];
    let batch = Batch::new(&spec, requests.iter().collect(), vec![1, 1]);
    let answers = batch.scatter(vec![OutputTensor {
        name: "OUT".into(),
        datatype: DataType::Bytes,
        shape: vec![3, 2],
        data: Bytes::from(join_bytes_elements([b"x".as_slice(); 6])),
        device: None,
    }]);
    for answer in answers {
        let e = answer.expect_err("batch dimension 3 for 2 rows");
        assert_eq!(
            e.message(),
            "output 'OUT' of model 'strings' has batch dimension Some(3), expected 2"
        );
    }
}

/// Inputs reach the backend in their `reshape` layout, the batch dimension (summed over
/// the batch) kept in front; inputs without one are untouched.
#[test]
fn gathered_inputs_have_their_reshape() {
    let spec = testing::spec(
        "reshaped",
        r#"backend: "identity" max_batch_size: 8
           input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2, -1 ] reshape { shape: [ 1, 2, -1 ] } },
                   { name: "PLAIN" data_type: TYPE_FP32 dims: [ 2 ] } ]
           output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2, -1 ] } ]"#,
    );
    let tensor = |name: &str, shape: Vec<i64>| InputTensor {
        name: name.into(),
        datatype: DataType::Fp32,
        data: Bytes::from(vec![0u8; 4 * shape.iter().product::<i64>() as usize]),
        shape,
        device: None,
    };
    let requests = [
        testing::request(
            "reshaped",
            "a",
            vec![tensor("IN", vec![1, 2, 3]), tensor("PLAIN", vec![1, 2])],
        ),
        testing::request(
            "reshaped",
            "b",
            vec![tensor("IN", vec![2, 2, 3]), tensor("PLAIN", vec![2, 2])],
        ),
    ];
    let one = Batch::new(&spec, vec![&requests[0]], vec![1]);
    let gathered = one.gather_input("IN").expect("gathers").expect("present");
    assert_eq!(gathered.shape, vec![1, 1, 2, 3]);
    let both = Batch::new(&spec, requests.iter().collect(), vec![1, 2]);
    let gathered = both.gather_input("IN").expect("gathers").expect("present");
    assert_eq!(gathered.shape, vec![3, 1, 2, 3]);
    assert_eq!(gathered.data.len(), 4 * 18);
    let plain = both
        .gather_input("PLAIN")
        .expect("gathers")
        .expect("present");
    assert_eq!(plain.shape, vec![3, 2]);
}

#[test]
fn ragged_inputs_are_concatenated_as_one_dimension() {
    let spec = testing::spec(
        "ragged",
        r#"backend: "identity" max_batch_size: 8
           input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] allow_ragged_batch: true } ]
           output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]"#,
    );
    let rows = |id: &str, values: &[i32]| {
        testing::request(
            "ragged",
            id,
            vec![InputTensor {
                name: "IN".into(),
                datatype: DataType::Int32,
                shape: vec![1, values.len() as i64],
                data: Bytes::from(
                    values
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect::<Vec<_>>(),
                ),
                device: None,
            }],
        )
    };
    let (a, b, c) = (
        rows("a", &[1, 2, 3]),
        rows("b", &[4, 5, 6, 7]),
        rows("c", &[8]),
    );
    let batch = Batch::new(&spec, vec![&a, &b, &c], vec![1, 1, 1]);
    let gathered = batch.gather_input("IN").expect("gathers").expect("present");
    assert_eq!(gathered.shape, vec![8]);
    let values: Vec<i32> = gathered
        .data
        .chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(values, [1, 2, 3, 4, 5, 6, 7, 8]);
    // Alone, a request's ragged input is one dimension too (the model's input is [-1]).
    let alone = Batch::new(&spec, vec![&b], vec![1]);
    let gathered = alone.gather_input("IN").expect("gathers").expect("present");
    assert_eq!(gathered.shape, vec![4]);
}

/// The documented ragged model: `INPUT` ragged, every batch input kind over it, and an
/// output cut back by `INPUT`'s shapes.
fn ragged_model() -> std::sync::Arc<ModelSpec> {
    let kinds = [
        ("COUNT", "BATCH_ELEMENT_COUNT", "TYPE_INT32"),
        ("INDEX", "BATCH_ACCUMULATED_ELEMENT_COUNT", "TYPE_FP32"),
        (
            "INDEX0",
            "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
            "TYPE_INT32",
        ),
        ("MAX", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "TYPE_INT32"),
        ("SHAPES", "BATCH_ITEM_SHAPE", "TYPE_INT32"),
        ("FLAT", "BATCH_ITEM_SHAPE_FLATTEN", "TYPE_FP32"),
    ];
    let batch_inputs: Vec<String> = kinds
        .iter()
        .map(|(target, kind, datatype)| {
            format!(
                r#"{{ kind: {kind} target_name: "{target}" data_type: {datatype} source_input: "INPUT" }}"#
            )
        })
        .collect();
    testing::spec(
        "ragged",
        &format!(
            r#"backend: "identity" max_batch_size: 16
               input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }} ]
               output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
               batch_input [ {} ]
               batch_output [ {{ target_name: "OUTPUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" }} ]"#,
            batch_inputs.join(", ")
        ),
    )
}

fn fp32_request(id: &str, shape: Vec<i64>) -> InferRequest {
    let elements = shape.iter().product::<i64>() as usize;
    let data: Vec<u8> = (0..elements)
        .flat_map(|v| (v as f32).to_le_bytes())
        .collect();
    testing::request(
        "ragged",
        id,
        vec![InputTensor {
            name: "INPUT".into(),
            datatype: DataType::Fp32,
            shape,
            data: Bytes::from(data),
            device: None,
        }],
    )
}

fn values(gathered: &GatheredInput, datatype: DataType) -> Vec<f64> {
    gathered
        .data
        .chunks(4)
        .map(|c| {
            let bytes = [c[0], c[1], c[2], c[3]];
            match datatype {
                DataType::Fp32 => f64::from(f32::from_le_bytes(bytes)),
                _ => f64::from(i32::from_le_bytes(bytes)),
            }
        })
        .collect()
}

#[test]
fn batch_inputs_follow_tritons_documented_layout() {
    let spec = ragged_model();
    // The documentation's requests: [1, 3], [1, 4], [1, 5]; then a batch of two items.
    let requests = [
        fp32_request("a", vec![1, 3]),
        fp32_request("b", vec![1, 4]),
        fp32_request("c", vec![1, 5]),
        fp32_request("d", vec![2, 2]),
    ];
    let batch = Batch::new(&spec, requests.iter().collect(), vec![1, 1, 1, 2]);
    let input = |target: &str| {
        let found = spec
            .batch_inputs
            .iter()
            .find(|b| b.targets == [target])
            .expect("configured");
        let gathered = batch.batch_input(found).expect("computes");
        (gathered.shape.clone(), values(&gathered, found.datatype))
    };
    assert_eq!(input("COUNT"), (vec![4], vec![3., 4., 5., 4.]));
    assert_eq!(input("INDEX"), (vec![4], vec![3., 7., 12., 16.]));
    assert_eq!(input("INDEX0"), (vec![5], vec![0., 3., 7., 12., 16.]));
    assert_eq!(input("MAX"), (vec![5], vec![0.; 5]));
    // One row per batch item (request d has two), each the item's shape without the
    // batch dimension.
    assert_eq!(input("SHAPES"), (vec![5, 1], vec![3., 4., 5., 2., 2.]));
    assert_eq!(input("FLAT"), (vec![5], vec![3., 4., 5., 2., 2.]));
    let gathered = batch
        .gather_input("INPUT")
        .expect("gathers")
        .expect("present");
    assert_eq!(gathered.shape, vec![16]);
}

#[test]
fn batch_outputs_are_cut_by_the_source_inputs_shapes() {
    let spec = ragged_model();
    let requests = [fp32_request("a", vec![1, 3]), fp32_request("b", vec![2, 2])];
    let output = |elements: usize| OutputTensor {
        name: "OUTPUT".into(),
        datatype: DataType::Fp32,
        shape: vec![elements as i64],
        data: Bytes::from(
            (0..elements)
                .flat_map(|v| (v as f32).to_le_bytes())
                .collect::<Vec<_>>(),
        ),
        device: None,
    };
    let batch = Batch::new(&spec, requests.iter().collect(), vec![1, 2]);
    let parts: Vec<Vec<OutputTensor>> = batch
        .scatter(vec![output(7)])
        .into_iter()
        .map(|r| r.expect("scatters"))
        .collect();
    assert_eq!(parts[0][0].shape, vec![1, 3]);
    assert_eq!(parts[0][0].data, output(7).data.slice(0..12));
    assert_eq!(parts[1][0].shape, vec![2, 2]);
    assert_eq!(parts[1][0].data, output(7).data.slice(12..28));
    // A lone request is reshaped too; an output too small for the parts is an error.
    let alone = Batch::new(&spec, vec![&requests[1]], vec![2]);
    let parts = alone.scatter(vec![output(4)]);
    assert_eq!(parts[0].as_ref().expect("scatters")[0].shape, vec![2, 2]);
    let short = batch.scatter(vec![output(6)]);
    let message = short[0]
        .as_ref()
        .expect_err("too short")
        .message()
        .to_string();
    assert!(
        message.contains("fewer than its batch_output parts need"),
        "{message}"
    );
}

#[test]
fn batch_io_configs_are_checked_with_tritons_words() {
    let load = |extra: &str| {
        let text = format!(
            r#"name: "m" backend: "identity" max_batch_size: 4
               input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
               output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }},
                        {{ name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] }} ]
               {extra}"#
        );
        let config = crate::config::parse_model_config(std::path::Path::new("config.pbtxt"), &text)
            .expect("parses");
        ModelSpec::new(config, 1)
            .map(|_| ())
            .map_err(|e| e.message().to_string())
    };
    let cases = [
        (
            r#"batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP32 } ]"#,
            "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0",
        ),
        (
            r#"batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT64 source_input: "IN" } ]"#,
            "batch input data type must be TYPE_INT32 or TYPE_FP32",
        ),
        (
            r#"batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "N" data_type: TYPE_INT32 source_input: "X" } ]"#,
            "unknown source input name 'X'",
        ),
        (
            r#"batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "X" source_input: "IN" } ]"#,
            "unknown target output name 'X'",
        ),
        (
            r#"batch_output [ { target_name: [ "OUT", "OUT" ] source_input: "IN" } ]"#,
            "target output name 'OUT' can only be specified once",
        ),
        (
            r#"batch_output [ { target_name: "TEXT" source_input: "IN" } ]"#,
            "batch output 'TEXT' must have a fixed-size data type, not TYPE_STRING",
        ),
    ];
    for (extra, expected) in cases {
        assert_eq!(load(extra), Err(expected.to_string()), "{extra}");
    }
    assert_eq!(
        load(r#"batch_output [ { target_name: "OUT" source_input: "IN" } ]"#),
        Ok(())
    );
}
