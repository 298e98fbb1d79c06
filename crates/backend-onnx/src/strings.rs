//! ONNX string tensors as raw bytes: the C boundary for BYTES elements.
//!
//! ONNX Runtime keeps each string element as a `std::string`, which holds any bytes. The
//! `ort` crate's safe API goes through `CString` (`FillStringTensor`, so an embedded NUL
//! fails) and `String` (extraction, so bytes that are not UTF-8 fail). This module uses
//! the C API calls that take explicit lengths instead, so an element is whatever bytes the
//! client sent, NUL and non-UTF-8 included:
//! - writing: `GetResizedStringTensorElementBuffer` (ONNX Runtime ≥ 1.16) sizes an element
//!   and hands out its buffer, which the element's bytes are copied into;
//! - reading: `GetStringTensorElementLength` and `GetStringTensorElement` copy each element
//!   out with its length, straight into the protocol's length-prefixed layout.
//!
//! Every ORT status is checked; every `unsafe` block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::c_char;
use std::ptr;

use ort::memory::Allocator;
use ort::value::{DynTensor, DynValue, TensorElementType};
use ort::AsPointer;

use nereid_core::{Error, Result};

fn ort_error(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("onnx runtime error: {e}"))
}

/// Turns the status an ORT API call returned into a `Result`, releasing it.
fn check(status: ort::sys::OrtStatusPtr) -> Result<()> {
    // SAFETY: `status` was just returned by an ORT API function and nothing else holds it;
    // `result_from_status` takes ownership (null means success) and releases the status.
    unsafe { ort::Error::result_from_status(status) }.map_err(ort_error)
}

/// The number of elements of `shape`, refusing negative dimensions and overflow.
fn element_count(shape: &[i64]) -> Result<usize> {
    shape.iter().try_fold(1usize, |n, &d| {
        usize::try_from(d)
            .ok()
            .and_then(|d| n.checked_mul(d))
            .ok_or_else(|| Error::internal(format!("invalid string tensor shape {shape:?}")))
    })
}

/// A string tensor of `shape` whose elements are exactly `elements` (any bytes).
pub fn to_string_tensor(shape: &[i64], elements: &[&[u8]]) -> Result<DynValue> {
    let count = element_count(shape)?;
    if count != elements.len() {
        return Err(Error::internal(format!(
            "string tensor of shape {shape:?} needs {count} elements, got {}",
            elements.len()
        )));
    }
    // `CreateTensorAsOrtValue`: ORT constructs `count` empty strings.
    let mut tensor = DynTensor::new(&Allocator::default(), TensorElementType::String, shape)
        .map_err(ort_error)?;
    let value = tensor.ptr_mut();
    let api = ort::api();
    for (index, element) in elements.iter().enumerate() {
        let mut buffer: *mut c_char = ptr::null_mut();
        // SAFETY: `value` is the live string tensor owned by `tensor` (which outlives this
        // loop and is not otherwise used meanwhile); ORT checks `index` against the element
        // count, resizes that element to `element.len()` bytes and stores a pointer to its
        // storage in `buffer`, a valid out-pointer.
        let status = unsafe {
            (api.GetResizedStringTensorElementBuffer)(value, index, element.len(), &mut buffer)
        };
        check(status)?;
        if element.is_empty() {
            continue;
        }
        if buffer.is_null() {
            return Err(ort_error("no buffer for a string tensor element"));
        }
        // SAFETY: `buffer` points at the element's `element.len()` bytes, just sized by ORT
        // and valid until the element is resized again or the tensor is released (neither
        // happens before the copy ends); `element` is the request's memory, never ORT's, so
        // the two do not overlap.
        unsafe { ptr::copy_nonoverlapping(element.as_ptr(), buffer.cast::<u8>(), element.len()) };
    }
    Ok(tensor.into_dyn())
}

/// The shape and elements of a string tensor, in the protocol's BYTES layout (each element
/// as a 4-byte little-endian length and its bytes, exactly as ORT holds them).
pub fn from_string_tensor(value: &DynValue) -> Result<(Vec<i64>, Vec<u8>)> {
    let dtype = value.dtype();
    let shape = match (dtype.tensor_type(), dtype.tensor_shape()) {
        (Some(TensorElementType::String), Some(shape)) => shape.to_vec(),
        _ => {
            return Err(Error::internal(
                "onnx runtime error: output is not a BYTES tensor",
            ))
        }
    };
    let count = element_count(&shape)?;
    let value = value.ptr();
    let api = ort::api();
    let mut total = 0usize;
    // SAFETY: `value` is a live string tensor borrowed for this whole function, and `total`
    // a valid out-pointer.
    check(unsafe { (api.GetStringTensorDataLength)(value, &mut total) })?;
    let capacity = count
        .checked_mul(4)
        .and_then(|prefixes| prefixes.checked_add(total))
        .ok_or_else(|| ort_error("string tensor too large"))?;
    let mut out = Vec::with_capacity(capacity);
    for index in 0..count {
        let mut len = 0usize;
        // SAFETY: as above; ORT checks `index` against the element count.
        check(unsafe { (api.GetStringTensorElementLength)(value, index, &mut len) })?;
        let prefix = u32::try_from(len).map_err(|_| {
            Error::internal(format!(
                "string element {index} is {len} bytes, more than a BYTES element can hold (4 GiB)"
            ))
        })?;
        out.extend_from_slice(&prefix.to_le_bytes());
        let start = out.len();
        out.resize(start + len, 0);
        if len == 0 {
            continue;
        }
        let dest = out[start..].as_mut_ptr();
        // SAFETY: `dest` points at `len` writable bytes of `out`, which is not touched
        // until the call returns; ORT copies element `index` there only if its length is at
        // most `len` (it is exactly `len`, read above from the same unchanged tensor).
        check(unsafe { (api.GetStringTensorElement)(value, len, index, dest.cast()) })?;
    }
    Ok((shape, out))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, OnceLock};

    use nereid_core::request::{join_bytes_elements, split_bytes_elements};

    use super::*;
    use crate::OrtRuntime;

    /// Loads ONNX Runtime once for these tests (the wheel in the repository's `.venv`, as
    /// `scripts/setup.sh` installs it, or `ORT_DYLIB_PATH`).
    fn runtime() -> Arc<ort::environment::Environment> {
        static RUNTIME: OnceLock<Arc<OrtRuntime>> = OnceLock::new();
        let runtime = RUNTIME.get_or_init(|| {
            let library = crate::find_library(None)
                .expect("libonnxruntime not found: run scripts/setup.sh or set ORT_DYLIB_PATH");
            OrtRuntime::new(library)
        });
        runtime.environment().expect("ONNX Runtime loads")
    }

    fn round_trip(shape: &[i64], elements: &[&[u8]]) {
        runtime();
        let value = to_string_tensor(shape, elements).expect("tensor");
        let (got_shape, joined) = from_string_tensor(&value).expect("elements");
        assert_eq!(got_shape, shape);
        assert_eq!(joined, join_bytes_elements(elements.iter().copied()));
        let got = split_bytes_elements(&joined).expect("well-formed");
        assert_eq!(got, elements);
    }

    #[test]
    fn any_bytes_round_trip() {
        round_trip(
            &[2, 3],
            &[
                b"a\x00b",
                b"\xff\xfe",
                b"",
                b"\x00",
                "\u{e9}t\u{e9} \u{1f600}".as_bytes(),
                b"trailing\x00",
            ],
        );
    }

    #[test]
    fn empty_elements_and_empty_tensors() {
        round_trip(&[3], &[b"", b"", b""]);
        round_trip(&[0], &[]);
        round_trip(&[2, 0, 4], &[]);
        round_trip(&[], &[b"scalar\x00"]);
    }

    #[test]
    fn a_large_element() {
        // 16 MiB of every byte value, NULs included, beside small elements.
        let large: Vec<u8> = (0..16 << 20).map(|i: u32| (i % 251) as u8).collect();
        round_trip(&[3], &[b"x", &large, b"\x00"]);
    }

    #[test]
    fn ort_reads_what_was_written() {
        // ORT's own view of the elements (total length, per-element lengths) matches: the
        // bytes were not cut at a NUL on the way in.
        runtime();
        let value = to_string_tensor(&[2], &[b"a\x00b\x00", b"\xff"]).expect("tensor");
        let api = ort::api();
        let mut total = 0usize;
        // SAFETY: `value` is a live string tensor and `total` a valid out-pointer.
        check(unsafe { (api.GetStringTensorDataLength)(value.ptr(), &mut total) }).expect("length");
        assert_eq!(total, 5);
    }

    #[test]
    fn element_count_must_match_the_shape() {
        runtime();
        let error = to_string_tensor(&[2], &[b"only one"]).expect_err("count mismatch");
        assert!(error.message().contains("needs 2 elements"), "{error:?}");
        assert!(to_string_tensor(&[-1], &[]).is_err());
    }

    #[test]
    fn a_number_tensor_is_not_read_as_strings() {
        runtime();
        let value = ort::value::Tensor::from_array((vec![2i64], vec![1i32, 2]))
            .expect("tensor")
            .into_dyn();
        assert!(from_string_tensor(&value).is_err());
    }

    #[test]
    fn a_session_passes_any_bytes_through() {
        // The example identity_string model (ONNX Identity on a string tensor), run the
        // way an instance runs it: protocol bytes in, protocol bytes out.
        use crate::convert::{from_value, to_value};
        use nereid_core::DataType;

        let environment = runtime();
        let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/models/identity_string/1/model.onnx");
        let mut session =
            crate::session_options::probe_session(&environment, "identity_string", &model)
                .expect("session");
        let large = vec![0u8; 1 << 20];
        let elements: [&[u8]; 5] = [b"a\x00b", b"\xff\xfe", b"", b"\x00\x00", &large];
        let data = join_bytes_elements(elements);
        let input = to_value(DataType::Bytes, &[1, 5], &data).expect("input");
        let mut outputs = session
            .run(vec![("INPUT0".to_string(), input)])
            .expect("run");
        let output = outputs.remove("OUTPUT0").expect("OUTPUT0");
        let (shape, got) = from_value(DataType::Bytes, output).expect("output");
        assert_eq!(shape, [1, 5]);
        assert_eq!(&got[..], &data[..]);
    }
}
