//! Classification: ordering (libstdc++'s `std::sort`, ties included), value formatting,
//! batch and non-batch shapes, labels, the unsupported types and the label file rules.
//!
//! The orders and strings expected here were printed by Triton's `AddClassResults` code
//! compiled with g++ 12 (libstdc++); `matches_libstdcxx_golden` compares against a whole
//! file of such cases when `NEREID_CLASSIFICATION_GOLDEN` names one (see its comment).

use super::*;
use crate::request::split_bytes_elements;

fn tensor(datatype: DataType, shape: &[i64], data: Vec<u8>) -> OutputTensor {
    OutputTensor {
        name: "OUT".into(),
        datatype,
        shape: shape.to_vec(),
        data: data.into(),
        device: None,
    }
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn i32s(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn strings(output: &OutputTensor) -> Vec<String> {
    split_bytes_elements(&output.data)
        .expect("BYTES framing")
        .into_iter()
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

fn labels(lines: &[&str]) -> Labels {
    let mut labels = Labels::default();
    labels.inherit(
        "OUT",
        Arc::new(lines.iter().map(|l| l.as_bytes().to_vec()).collect()),
    );
    labels
}

/// The indices `cxx_sort` leaves for `values` sorted by `>`.
fn order<T: Copy + PartialOrd>(values: &[T]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    cxx_sort(&mut idx, &|a: usize, b: usize| values[a] > values[b]);
    idx
}

#[test]
fn top_k_of_one_row_with_labels() {
    let out = tensor(DataType::Fp32, &[4], f32s(&[0.1, 0.3, 0.2, 0.4]));
    let got = classify(&out, 2, false, &labels(&["a", "b", "c", "d"])).expect("classified");
    assert_eq!(got.datatype, DataType::Bytes);
    assert_eq!(got.shape, vec![2]);
    assert_eq!(strings(&got), ["0.400000:3:d", "0.300000:1:b"]);
    let got = classify(&out, 2, false, &Labels::default()).expect("classified");
    assert_eq!(strings(&got), ["0.400000:3", "0.300000:1"]);
}

#[test]
fn batch_rows_are_classified_separately() {
    let out = tensor(DataType::Int32, &[2, 3], i32s(&[1, 5, 3, 9, 0, 9]));
    let got = classify(&out, 2, true, &Labels::default()).expect("classified");
    assert_eq!(got.shape, vec![2, 2]);
    assert_eq!(strings(&got), ["5:1", "3:2", "9:0", "9:2"]);
    // Without batching the same tensor is one row of six.
    let got = classify(&out, 2, false, &Labels::default()).expect("classified");
    assert_eq!(got.shape, vec![2]);
    assert_eq!(strings(&got), ["9:3", "9:5"]);
}

#[test]
fn count_is_capped_at_the_row_size() {
    let out = tensor(DataType::Uint8, &[2, 3], vec![1, 2, 3, 4, 5, 6]);
    let got = classify(&out, 10, true, &Labels::default()).expect("classified");
    assert_eq!(got.shape, vec![2, 3]);
    assert_eq!(strings(&got), ["3:2", "2:1", "1:0", "6:2", "5:1", "4:0"]);
    // Rows after the batch dimension are flattened: [1, 2, 2] has rows of 4.
    let out = tensor(DataType::Uint8, &[1, 2, 2], vec![4, 1, 3, 2]);
    let got = classify(&out, 3, true, &Labels::default()).expect("classified");
    assert_eq!(got.shape, vec![1, 3]);
    assert_eq!(strings(&got), ["4:0", "3:2", "2:3"]);
}

#[test]
fn zero_count_and_empty_tensors_give_empty_outputs() {
    let out = tensor(DataType::Fp32, &[1, 3], f32s(&[1.0, 2.0, 3.0]));
    let got = classify(&out, 0, true, &Labels::default()).expect("classified");
    assert_eq!(got.shape, vec![1, 0]);
    assert!(got.data.is_empty());
    // A batch of 0 counts as no batch dimension, as in Triton: shape [min(N, 0)].
    let out = tensor(DataType::Fp32, &[0, 3], Vec::new());
    let got = classify(&out, 2, true, &Labels::default()).expect("classified");
    assert_eq!(got.shape, vec![0]);
    assert!(got.data.is_empty());
}

#[test]
fn ties_up_to_sixteen_keep_index_order() {
    // libstdc++ sorts 16 elements or fewer by insertion sort, which is stable.
    let values = [1u8, 3, 3, 0, 3, 1, 2, 3, 0, 0, 3, 1, 2, 2, 3, 1];
    assert_eq!(
        order(&values),
        [1, 2, 4, 7, 10, 14, 6, 12, 13, 0, 5, 11, 15, 3, 8, 9]
    );
}

#[test]
fn ties_past_sixteen_follow_libstdcxx() {
    // Printed by std::sort with g++ 12: the introsort pass reorders equal elements.
    let values: Vec<i32> = (0..40).map(|i| (i * 7919) % 13 % 3).collect();
    assert_eq!(
        order(&values),
        [
            9, 17, 22, 14, 25, 12, 27, 30, 35, 4, 38, 1, 31, 20, 28, 33, 36, 23, 2, 15, 5, 10, 18,
            7, 29, 39, 37, 3, 34, 6, 32, 8, 11, 26, 13, 24, 16, 21, 0, 19
        ]
    );
    // All equal: the partition swaps pairs around the middle.
    let same = vec![7u8; 20];
    assert_eq!(
        order(&same),
        [10, 19, 18, 17, 16, 15, 14, 13, 12, 11, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    );
}

#[test]
fn heap_sort_fallback_is_reproduced() {
    // Past 2·log2(n) partition levels libstdc++ finishes the range by heap sort; this
    // input (a staircase up and down, every value twice) reaches it five times.
    let n = 1000usize;
    let values: Vec<i32> = (0..n).map(|i| (i.min(n - i) / 2) as i32).collect();
    let got = order(&values);
    assert_eq!(
        &got[..10],
        [500, 498, 499, 501, 502, 496, 497, 503, 504, 506]
    );
}

#[test]
fn values_print_like_std_to_string() {
    let cases: &[(f32, &str)] = &[
        (0.0078125, "0.007812"), // an exact tie rounds to even, as glibc does
        (-0.0, "-0.000000"),
        (-1e-7, "-0.000000"),
        (1e20, "100000002004087734272.000000"),
        (0.1, "0.100000"),
        (f32::INFINITY, "inf"),
        (f32::NEG_INFINITY, "-inf"),
        (f32::NAN, "nan"),
        (-f32::NAN, "-nan"),
    ];
    for &(value, text) in cases {
        assert_eq!(value.text(), text, "{value}");
    }
    assert_eq!(0.0000025f64.text(), "0.000003");
    assert_eq!(2.0000005f64.text(), "2.000001");
    assert_eq!((-5i8).text(), "-5");
    assert_eq!(u64::MAX.text(), "18446744073709551615");
}

#[test]
fn empty_labels_and_missing_lines_add_nothing() {
    let out = tensor(DataType::Int64, &[3], {
        [3i64, 2, 1].iter().flat_map(|v| v.to_le_bytes()).collect()
    });
    let got = classify(&out, 3, false, &labels(&["x", ""])).expect("classified");
    assert_eq!(strings(&got), ["3:0:x", "2:1", "1:2"]);
}

#[test]
fn unsupported_types_and_huge_rows_fail() {
    for datatype in [
        DataType::Bool,
        DataType::Fp16,
        DataType::Bf16,
        DataType::Bytes,
    ] {
        let out = tensor(datatype, &[1, 2], vec![0; 4]);
        let e = classify(&out, 1, true, &Labels::default()).expect_err("unsupported");
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArg);
        assert_eq!(
            e.message(),
            format!(
                "class result not available for output due to unsupported type '{}'",
                datatype.as_str()
            )
        );
    }
    let n = MAX_CLASSIFICATION_ELEMENTS + 1;
    let out = tensor(DataType::Uint8, &[n as i64], vec![0; n]);
    let e = classify(&out, 1, false, &Labels::default()).expect_err("too large");
    assert_eq!(e.message(), "classification output tensor too large");
}

#[test]
fn response_outputs_are_replaced_in_place() {
    let mut response = InferResponse {
        model_name: "m".into(),
        model_version: 1,
        id: String::new(),
        parameters: Vec::new(),
        outputs: vec![
            tensor(DataType::Fp32, &[1, 2], f32s(&[0.25, 0.75])),
            OutputTensor {
                name: "RAW".into(),
                ..tensor(DataType::Fp32, &[1, 2], f32s(&[0.25, 0.75]))
            },
        ]
        .into(),
    };
    let raw = response.outputs[1].clone();
    classify_response(
        &mut response,
        &[("OUT".into(), 1)],
        true,
        &labels(&["no", "yes"]),
    )
    .expect("classified");
    assert_eq!(strings(&response.outputs[0]), ["0.750000:1:yes"]);
    assert_eq!(response.outputs[0].shape, vec![1, 1]);
    assert_eq!(response.outputs[1], raw);
}

fn config_with_labels(files: &[(&str, &str)]) -> ModelConfig {
    let mut config = ModelConfig {
        name: "m".into(),
        ..Default::default()
    };
    for (output, file) in files {
        config.output.push(nereid_proto::inference::ModelOutput {
            name: output.to_string(),
            label_filename: file.to_string(),
            ..Default::default()
        });
    }
    config
}

#[test]
fn label_files_are_read_like_getline() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("labels.txt"), "cat\ndog\r\n\nbird\n").expect("write");
    std::fs::write(dir.path().join("last.txt"), "a\nb").expect("write");
    let config = config_with_labels(&[("A", "labels.txt"), ("B", "/last.txt"), ("C", "")]);
    let labels = read_labels(&config, dir.path()).expect("labels");
    let a = labels.of("A").expect("A has labels");
    assert_eq!(
        a.as_slice(),
        [
            b"cat".to_vec(),
            b"dog\r".to_vec(),
            Vec::new(),
            b"bird".to_vec()
        ]
    );
    assert_eq!(labels.get("A", 2), None);
    assert_eq!(labels.get("A", 3), Some(b"bird".as_slice()));
    assert_eq!(labels.get("A", 4), None);
    // A leading '/' stays inside the model directory, as Triton's JoinPath has it.
    assert_eq!(labels.get("B", 1), Some(b"b".as_slice()));
    assert!(labels.of("C").is_none());
}

#[test]
fn label_file_errors_are_tritons() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("m");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(root.path().join("outside.txt"), "x\n").expect("write");
    let missing =
        read_labels(&config_with_labels(&[("A", "nope.txt")]), &dir).expect_err("missing file");
    assert_eq!(missing.kind(), crate::error::ErrorKind::Internal);
    assert_eq!(
        missing.message(),
        format!(
            "failed to open text file for read {}/nope.txt: No such file or directory",
            dir.display()
        )
    );
    let outside =
        read_labels(&config_with_labels(&[("A", "../outside.txt")]), &dir).expect_err("outside");
    assert_eq!(outside.kind(), crate::error::ErrorKind::Unsupported);
    assert_eq!(
        outside.message(),
        format!(
            "label file path '{}/../outside.txt' for output 'A' in model 'm' is outside model directory",
            dir.display()
        )
    );
    // A path that only passes through `..` back into the directory is fine.
    std::fs::write(dir.join("in.txt"), "y\n").expect("write");
    std::fs::create_dir(dir.join("sub")).expect("mkdir");
    let back = read_labels(&config_with_labels(&[("A", "sub/../in.txt")]), &dir);
    assert!(back.is_ok(), "{back:?}");
}

/// Compares with a file of cases printed by Triton's `AddClassResults` compiled with g++:
/// each line is `<type> <count> <n> <element bits in hex>... | <strings>...`. The
/// generator is `scripts/classification_reference.cc` (`g++ -O2 -std=c++17`; run it and
/// point `NEREID_CLASSIFICATION_GOLDEN` at its output).
#[test]
#[ignore = "needs NEREID_CLASSIFICATION_GOLDEN, a file written by the C++ reference"]
fn matches_libstdcxx_golden() {
    let path = std::env::var("NEREID_CLASSIFICATION_GOLDEN").expect("NEREID_CLASSIFICATION_GOLDEN");
    let text = std::fs::read_to_string(path).expect("golden file");
    let mut checked = 0;
    for line in text.lines() {
        let (case, expected) = line.split_once(" |").expect("a '|' in every line");
        let mut fields = case.split(' ');
        let kind = fields.next().expect("type");
        let count: u32 = fields.next().expect("count").parse().expect("count");
        let n: usize = fields.next().expect("n").parse().expect("n");
        let bits: Vec<u64> = fields
            .map(|h| u64::from_str_radix(h, 16).expect("hex"))
            .collect();
        assert_eq!(bits.len(), n, "{line}");
        let (datatype, width) = match kind {
            "u8" => (DataType::Uint8, 1),
            "u16" => (DataType::Uint16, 2),
            "u32" => (DataType::Uint32, 4),
            "u64" => (DataType::Uint64, 8),
            "i8" => (DataType::Int8, 1),
            "i16" => (DataType::Int16, 2),
            "i32" => (DataType::Int32, 4),
            "i64" => (DataType::Int64, 8),
            "f32" => (DataType::Fp32, 4),
            "f64" => (DataType::Fp64, 8),
            other => panic!("unknown type {other}"),
        };
        let data: Vec<u8> = bits
            .iter()
            .flat_map(|b| b.to_le_bytes()[..width].to_vec())
            .collect();
        let out = tensor(datatype, &[n as i64], data);
        let got = classify(&out, count, false, &Labels::default()).expect("classified");
        let expected: Vec<&str> = expected.split_whitespace().collect();
        assert_eq!(strings(&got), expected, "{line}");
        checked += 1;
    }
    assert!(checked > 0);
}
