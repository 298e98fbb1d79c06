//! Tensor data in JSON: nested arrays of numbers, booleans or strings, converted straight
//! to and from the raw little-endian bytes the core uses (no intermediate JSON tree).
//! FP16 and BF16 are accepted and produced as JSON numbers (Triton refuses them).

use std::fmt;

use half::{bf16, f16};
use nereid_core::request::split_bytes_elements;
use nereid_core::DataType;
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeSeq, Serializer};

/// Triton's `HTTP_MAX_JSON_NESTING_DEPTH`: tensor data nested this deep is refused (the
/// outermost value is at depth 0).
pub const MAX_JSON_NESTING_DEPTH: u32 = 100;

/// Triton's message for data nested deeper than [`MAX_JSON_NESTING_DEPTH`].
const TOO_DEEP: &str = "JSON nesting depth exceeds maximum allowed limit (100)";

/// Why JSON tensor data could not be read.
#[derive(Debug, Clone, PartialEq)]
pub enum DataError {
    /// Nested deeper than [`MAX_JSON_NESTING_DEPTH`].
    TooDeep,
    /// Any other problem, described.
    Invalid(String),
}

impl DataError {
    /// The client error, worded as Triton words it: the depth error bare for BYTES (which
    /// Triton sizes before reading) and after `Unable to parse 'data': ` otherwise; other
    /// problems after `Unable to parse {what}: `.
    pub fn into_error(self, datatype: DataType, what: &str) -> nereid_core::Error {
        let message = match self {
            DataError::TooDeep if datatype == DataType::Bytes => TOO_DEEP.to_string(),
            DataError::TooDeep => format!("Unable to parse 'data': {TOO_DEEP}"),
            DataError::Invalid(e) => format!("Unable to parse {what}: {e}"),
        };
        nereid_core::Error::invalid_arg(message)
    }
}

/// Parses JSON tensor `data` of type `datatype` into raw bytes.
pub fn parse_data(datatype: DataType, json: &str) -> Result<Vec<u8>, DataError> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_str(json);
    Flatten {
        datatype,
        out: &mut out,
        depth: 0,
    }
    .deserialize(&mut de)
    .map_err(|e| {
        let text = e.to_string();
        if text.starts_with(TOO_DEEP) {
            DataError::TooDeep
        } else {
            DataError::Invalid(text)
        }
    })?;
    Ok(out)
}

struct Flatten<'a> {
    datatype: DataType,
    out: &'a mut Vec<u8>,
    /// How deep in the data this value is (0: the outermost).
    depth: u32,
}

impl<'de> DeserializeSeed<'de> for Flatten<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.depth >= MAX_JSON_NESTING_DEPTH {
            return Err(de::Error::custom(TOO_DEEP));
        }
        d.deserialize_any(self)
    }
}

/// Appends integer `v` as one element of `datatype`; a float type takes it as a number.
/// Shared by the serde reader below and the request scan, so both convert alike.
#[inline]
pub(crate) fn put_int(datatype: DataType, out: &mut Vec<u8>, v: i128) -> Result<(), String> {
    let range_error = || format!("value {v} is out of range for {datatype}");
    macro_rules! put {
        ($t:ty) => {{
            let x = <$t>::try_from(v).map_err(|_| range_error())?;
            out.extend_from_slice(&x.to_le_bytes());
        }};
    }
    match datatype {
        DataType::Uint8 => put!(u8),
        DataType::Uint16 => put!(u16),
        DataType::Uint32 => put!(u32),
        DataType::Uint64 => put!(u64),
        DataType::Int8 => put!(i8),
        DataType::Int16 => put!(i16),
        DataType::Int32 => put!(i32),
        DataType::Int64 => put!(i64),
        _ => return put_float(datatype, out, int_to_f64(v)),
    }
    Ok(())
}

/// `v` as the nearest `f64`: through 64 bits where it fits (the same rounding; a 128-bit
/// conversion is a software routine).
fn int_to_f64(v: i128) -> f64 {
    if let Ok(v) = i64::try_from(v) {
        v as f64
    } else if let Ok(v) = u64::try_from(v) {
        v as f64
    } else {
        v as f64
    }
}

/// What Triton's JSON reader (TRITONJSON) says of a BYTES element that is not a string.
const NOT_A_STRING: &str = "attempt to access JSON non-string as string";

/// The refusal of element `v` for `datatype`, opening with the sentence Triton's JSON
/// reader (TRITONJSON) gives for that type, as Triton's infer and generate endpoints
/// answer (clients match it), then which element it was.
fn wrong_element(datatype: DataType, v: impl fmt::Display) -> String {
    let sentence = match datatype {
        DataType::Bytes => return NOT_A_STRING.to_string(),
        DataType::Bool => "attempt to access JSON non-boolean as boolean",
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64 => {
            "attempt to access JSON non-unsigned-integer as unsigned-integer"
        }
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            "attempt to access JSON non-signed-integer as signed-integer"
        }
        _ => "attempt to access JSON non-number as double",
    };
    format!("{sentence} ({datatype} element given {v})")
}

/// Appends `v` as one element of a float `datatype`; any other type refuses it.
#[inline]
pub(crate) fn put_float(datatype: DataType, out: &mut Vec<u8>, v: f64) -> Result<(), String> {
    match datatype {
        DataType::Fp16 => out.extend_from_slice(&f16::from_f64(v).to_le_bytes()),
        DataType::Bf16 => out.extend_from_slice(&bf16::from_f64(v).to_le_bytes()),
        DataType::Fp32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        DataType::Fp64 => out.extend_from_slice(&v.to_le_bytes()),
        other => return Err(wrong_element(other, v)),
    }
    Ok(())
}

/// Appends `v` as one element of a BOOL `datatype`; any other type refuses it.
#[inline]
pub(crate) fn put_bool(datatype: DataType, out: &mut Vec<u8>, v: bool) -> Result<(), String> {
    if datatype != DataType::Bool {
        return Err(wrong_element(datatype, v));
    }
    out.push(u8::from(v));
    Ok(())
}

impl<'de> Visitor<'de> for Flatten<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} values, possibly in nested arrays", self.datatype)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(wrong_element(self.datatype, "an object")))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let datatype = self.datatype;
        let depth = self.depth + 1;
        while seq
            .next_element_seed(Flatten {
                datatype,
                out: self.out,
                depth,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        put_bool(self.datatype, self.out, v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        put_int(self.datatype, self.out, i128::from(v)).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        put_int(self.datatype, self.out, i128::from(v)).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        put_float(self.datatype, self.out, v).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        if self.datatype != DataType::Bytes {
            return Err(E::custom(wrong_element(self.datatype, "a string")));
        }
        self.out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        self.out.extend_from_slice(v.as_bytes());
        Ok(())
    }
}

/// Checks that output `name` can be returned as JSON `data`. A JSON string holds text, so
/// each element of a BYTES output must be valid UTF-8 (NUL is fine: JSON writes `\u0000`).
/// Triton writes the raw bytes into the JSON string anyway, which makes the body invalid
/// JSON that its own Python client cannot parse; the error here names the way out instead.
pub fn check_json_text(name: &str, datatype: DataType, data: &[u8]) -> Result<(), String> {
    if datatype != DataType::Bytes {
        return Ok(());
    }
    let elements = split_bytes_elements(data)?;
    match elements.iter().position(|e| std::str::from_utf8(e).is_err()) {
        None => Ok(()),
        Some(index) => Err(format!(
            "output '{name}' can't be returned as JSON: its BYTES element {index} is not valid UTF-8; request it with \"binary_data\": true (or in shared memory)"
        )),
    }
}

/// Serializes raw tensor bytes as a flat JSON array, the way Triton returns `data`.
pub struct JsonData<'a> {
    /// Element type.
    pub datatype: DataType,
    /// Raw bytes.
    pub data: &'a [u8],
}

macro_rules! seq_of {
    ($ser:expr, $data:expr, $t:ty, $n:expr, $map:expr) => {{
        let mut seq = $ser.serialize_seq(Some($data.len() / $n))?;
        for chunk in $data.chunks_exact($n) {
            let raw = <$t>::from_le_bytes(chunk.try_into().expect("chunks_exact yields $n bytes"));
            seq.serialize_element(&$map(raw))?;
        }
        seq.end()
    }};
}

impl Serialize for JsonData<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.data;
        match self.datatype {
            DataType::Bool => seq_of!(s, d, u8, 1, |b: u8| b != 0),
            DataType::Uint8 => seq_of!(s, d, u8, 1, |x| x),
            DataType::Uint16 => seq_of!(s, d, u16, 2, |x| x),
            DataType::Uint32 => seq_of!(s, d, u32, 4, |x| x),
            DataType::Uint64 => seq_of!(s, d, u64, 8, |x| x),
            DataType::Int8 => seq_of!(s, d, i8, 1, |x| x),
            DataType::Int16 => seq_of!(s, d, i16, 2, |x| x),
            DataType::Int32 => seq_of!(s, d, i32, 4, |x| x),
            DataType::Int64 => seq_of!(s, d, i64, 8, |x| x),
            DataType::Fp16 => seq_of!(s, d, u16, 2, |x| f16::from_bits(x).to_f32()),
            DataType::Bf16 => seq_of!(s, d, u16, 2, |x| bf16::from_bits(x).to_f32()),
            DataType::Fp32 => seq_of!(s, d, f32, 4, |x| x),
            DataType::Fp64 => seq_of!(s, d, f64, 8, |x| x),
            DataType::Bytes => {
                let elements = split_bytes_elements(d).map_err(serde::ser::Error::custom)?;
                let mut seq = s.serialize_seq(Some(elements.len()))?;
                for e in elements {
                    // `check_json_text` refused non-UTF-8 elements before: never replace bytes.
                    let text = std::str::from_utf8(e).map_err(serde::ser::Error::custom)?;
                    seq.serialize_element(text)?;
                }
                seq.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(t: DataType, json: &str) -> String {
        let bytes = parse_data(t, json).expect("valid");
        serde_json::to_string(&JsonData {
            datatype: t,
            data: &bytes,
        })
        .expect("serializable")
    }

    #[test]
    fn nested_arrays_flatten_for_every_type() {
        assert_eq!(round_trip(DataType::Int32, "[[1,2],[3,-4]]"), "[1,2,3,-4]");
        assert_eq!(round_trip(DataType::Bool, "[true,false]"), "[true,false]");
        assert_eq!(round_trip(DataType::Fp32, "[1.5, 2]"), "[1.5,2.0]");
        assert_eq!(round_trip(DataType::Fp16, "[0.5, -2]"), "[0.5,-2.0]");
        assert_eq!(round_trip(DataType::Bf16, "[1.0]"), "[1.0]");
        assert_eq!(
            round_trip(DataType::Uint64, "[18446744073709551615]"),
            "[18446744073709551615]"
        );
        assert_eq!(
            round_trip(DataType::Bytes, r#"["a","","é"]"#),
            r#"["a","","é"]"#
        );
    }

    #[test]
    fn bytes_elements_in_json_must_be_text() {
        // NUL is text: JSON escapes it.
        let data = nereid_core::request::join_bytes_elements([b"a\x00b".as_slice(), b""]);
        assert_eq!(check_json_text("OUT", DataType::Bytes, &data), Ok(()));
        let json = serde_json::to_string(&JsonData {
            datatype: DataType::Bytes,
            data: &data,
        })
        .expect("serializable");
        assert_eq!(json, r#"["a\u0000b",""]"#);

        let data = nereid_core::request::join_bytes_elements([b"ok".as_slice(), b"\xff\xfe"]);
        let error = check_json_text("OUT", DataType::Bytes, &data).expect_err("not UTF-8");
        assert!(error.contains("output 'OUT'"), "{error}");
        assert!(error.contains("element 1 is not valid UTF-8"), "{error}");
        assert!(error.contains("binary_data"), "{error}");
        // Never replaced silently, even without the check.
        assert!(serde_json::to_string(&JsonData {
            datatype: DataType::Bytes,
            data: &data,
        })
        .is_err());
        // Other types have nothing to check.
        assert_eq!(check_json_text("OUT", DataType::Uint8, &[0xff]), Ok(()));
    }

    #[test]
    fn rejects_wrong_kinds_and_ranges() {
        assert!(parse_data(DataType::Uint8, "[256]").is_err());
        assert!(parse_data(DataType::Int32, "[1.5]").is_err());
        assert!(parse_data(DataType::Bool, "[1]").is_err());
        assert!(parse_data(DataType::Fp32, r#"["x"]"#).is_err());
        assert!(parse_data(DataType::Fp32, "[1,").is_err());
        // A BYTES element that is not a string: TRITONJSON's words, as Triton answers.
        for json in ["123", "[true]", "[1.5]", r#"{"USER": "hi"}"#] {
            match parse_data(DataType::Bytes, json) {
                Err(DataError::Invalid(e)) => assert!(e.starts_with(NOT_A_STRING), "{json}: {e}"),
                other => panic!("{json}: {other:?}"),
            }
        }
        // Other types too, each in TRITONJSON's sentence for it.
        for (datatype, json, sentence) in [
            (DataType::Bool, r#""false""#, "non-boolean as boolean"),
            (DataType::Bool, "[1]", "non-boolean as boolean"),
            (
                DataType::Int32,
                "[1.5]",
                "non-signed-integer as signed-integer",
            ),
            (
                DataType::Uint8,
                "[true]",
                "non-unsigned-integer as unsigned-integer",
            ),
            (DataType::Fp32, r#"[{"a": 1}]"#, "non-number as double"),
        ] {
            match parse_data(datatype, json) {
                Err(DataError::Invalid(e)) => assert!(
                    e.starts_with(&format!(
                        "attempt to access JSON {sentence} ({datatype} element given"
                    )),
                    "{json}: {e}"
                ),
                other => panic!("{json}: {other:?}"),
            }
        }
    }

    fn nested(levels: usize, leaf: &str) -> String {
        format!("{}{leaf}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn data_nested_as_deep_as_triton_allows() {
        // 99 arrays put the number at depth 99, the deepest Triton reads.
        assert_eq!(
            parse_data(DataType::Int32, &nested(99, "7")),
            Ok(7i32.to_le_bytes().to_vec())
        );
        for levels in [100, 127, 500] {
            assert_eq!(
                parse_data(DataType::Int32, &nested(levels, "7")),
                Err(DataError::TooDeep),
                "{levels}"
            );
        }
        let e = DataError::TooDeep.into_error(DataType::Int32, "'data' of input 'I'");
        assert_eq!(
            e.message(),
            "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit (100)"
        );
        let e = DataError::TooDeep.into_error(DataType::Bytes, "'data' of input 'I'");
        assert_eq!(
            e.message(),
            "JSON nesting depth exceeds maximum allowed limit (100)"
        );
    }
}
