//! Gather and scatter of `BYTES` tensors: requests with different row counts and string
//! lengths share a batch and each gets exactly its own rows back.

use bytes::Bytes;

use super::*;
use crate::request::join_bytes_elements;
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
