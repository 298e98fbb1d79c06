//! Typed tensor `contents` (the alternative to `raw_input_contents`) as the little-endian
//! bytes the core expects, with Triton's checks (server `src/grpc/infer_handler.cc`,
//! `InferGRPCToInput`).

use bytes::Bytes;
use nereid_core::request::join_bytes_elements;
use nereid_core::{DataType, Error, Result};
use nereid_proto::inference::InferTensorContents;

/// Typed `contents` as little-endian tensor bytes. Exactly one list may be used and its
/// type must match the declared datatype; INT8/INT16 come widened in `int_contents` and
/// UINT8/UINT16 in `uint_contents` (the low bytes are kept, as Triton does).
pub fn contents_to_bytes(
    model: &str,
    name: &str,
    declared: DataType,
    contents: &InferTensorContents,
) -> Result<Bytes> {
    let mut data: Option<Vec<u8>> = None;
    let mut supply = |list: DataType, bytes: &dyn Fn() -> Vec<u8>| -> Result<()> {
        if data.is_some() {
            return Err(Error::invalid_arg(format!(
                "unexpected explicit tensor data for input tensor '{name}' for model '{model}', binary data was already supplied."
            )));
        }
        if list != declared {
            return Err(Error::invalid_arg(format!(
                "unexpected explicit tensor data for input tensor '{name}' for model '{model}' of type '{list}', expected datatype '{declared}'"
            )));
        }
        data = Some(bytes());
        Ok(())
    };
    let c = contents;
    if !c.bool_contents.is_empty() {
        supply(DataType::Bool, &|| {
            c.bool_contents.iter().map(|&b| u8::from(b)).collect()
        })?;
    }
    if !c.int_contents.is_empty() {
        let list = match declared {
            DataType::Int8 | DataType::Int16 => declared,
            _ => DataType::Int32,
        };
        supply(list, &|| pack(&c.int_contents, i32::to_le_bytes, list))?;
    }
    if !c.int64_contents.is_empty() {
        supply(DataType::Int64, &|| {
            pack(&c.int64_contents, i64::to_le_bytes, DataType::Int64)
        })?;
    }
    if !c.uint_contents.is_empty() {
        let list = match declared {
            DataType::Uint8 | DataType::Uint16 => declared,
            _ => DataType::Uint32,
        };
        supply(list, &|| pack(&c.uint_contents, u32::to_le_bytes, list))?;
    }
    if !c.uint64_contents.is_empty() {
        supply(DataType::Uint64, &|| {
            pack(&c.uint64_contents, u64::to_le_bytes, DataType::Uint64)
        })?;
    }
    if !c.fp32_contents.is_empty() {
        supply(DataType::Fp32, &|| {
            pack(&c.fp32_contents, f32::to_le_bytes, DataType::Fp32)
        })?;
    }
    if !c.fp64_contents.is_empty() {
        supply(DataType::Fp64, &|| {
            pack(&c.fp64_contents, f64::to_le_bytes, DataType::Fp64)
        })?;
    }
    if !c.bytes_contents.is_empty() {
        supply(DataType::Bytes, &|| {
            join_bytes_elements(c.bytes_contents.iter().map(|b| b.as_ref()))
        })?;
    }
    Ok(data.map(Bytes::from).unwrap_or_default())
}

/// Each value's little-endian bytes, truncated to the element size of `element`
/// (e.g. the low byte of an `i32` for INT8).
fn pack<T: Copy, const N: usize>(
    values: &[T],
    to_le_bytes: fn(T) -> [u8; N],
    element: DataType,
) -> Vec<u8> {
    let width = element.element_size().unwrap_or(N).min(N);
    let mut out = Vec::with_capacity(values.len() * width);
    for &v in values {
        out.extend_from_slice(&to_le_bytes(v)[..width]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::ErrorKind;

    fn bytes_of(datatype: &str, contents: InferTensorContents) -> Result<Bytes> {
        let declared = DataType::parse(datatype).expect("test uses valid datatypes");
        contents_to_bytes("m", "IN", declared, &contents)
    }

    #[test]
    fn typed_contents_become_little_endian_bytes() {
        let c = |f: fn(&mut InferTensorContents)| {
            let mut c = InferTensorContents::default();
            f(&mut c);
            c
        };
        let cases: Vec<(&str, InferTensorContents, Vec<u8>)> = vec![
            (
                "BOOL",
                c(|c| c.bool_contents = vec![true, false]),
                vec![1, 0],
            ),
            ("INT8", c(|c| c.int_contents = vec![-1, 2]), vec![0xff, 2]),
            (
                "INT16",
                c(|c| c.int_contents = vec![-2, 3]),
                vec![0xfe, 0xff, 3, 0],
            ),
            ("INT32", c(|c| c.int_contents = vec![1]), vec![1, 0, 0, 0]),
            ("INT64", c(|c| c.int64_contents = vec![-1]), vec![0xff; 8]),
            ("UINT8", c(|c| c.uint_contents = vec![255, 1]), vec![255, 1]),
            ("UINT16", c(|c| c.uint_contents = vec![258]), vec![2, 1]),
            (
                "UINT32",
                c(|c| c.uint_contents = vec![258]),
                vec![2, 1, 0, 0],
            ),
            (
                "UINT64",
                c(|c| c.uint64_contents = vec![1]),
                vec![1, 0, 0, 0, 0, 0, 0, 0],
            ),
            (
                "FP32",
                c(|c| c.fp32_contents = vec![1.0]),
                1.0f32.to_le_bytes().to_vec(),
            ),
            (
                "FP64",
                c(|c| c.fp64_contents = vec![-2.5]),
                (-2.5f64).to_le_bytes().to_vec(),
            ),
            (
                "BYTES",
                c(|c| c.bytes_contents = vec![Bytes::from_static(b"ab"), Bytes::new()]),
                vec![2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0],
            ),
            ("FP32", InferTensorContents::default(), vec![]),
        ];
        for (datatype, contents, expected) in cases {
            let got = bytes_of(datatype, contents).expect("valid contents");
            assert_eq!(got.as_ref(), expected.as_slice(), "{datatype}");
        }
    }

    #[test]
    fn typed_contents_must_match_the_datatype() {
        let contents = InferTensorContents {
            fp32_contents: vec![1.0],
            ..Default::default()
        };
        let e = bytes_of("FP16", contents).expect_err("FP16 has no typed list");
        assert_eq!(e.kind(), ErrorKind::InvalidArg);
        assert_eq!(
            e.message(),
            "unexpected explicit tensor data for input tensor 'IN' for model 'm' of type 'FP32', expected datatype 'FP16'"
        );
        let two_lists = InferTensorContents {
            int_contents: vec![1],
            int64_contents: vec![1],
            ..Default::default()
        };
        let e = bytes_of("INT32", two_lists).expect_err("two lists");
        assert!(e.message().ends_with("binary data was already supplied."));
    }
}
