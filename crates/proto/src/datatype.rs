//! Tensor element types, with their three spellings: the protocol's (`FP32`), the model
//! configuration's (`TYPE_FP32`) and their element sizes.

use crate::inference::DataType as ConfigDataType;

/// A tensor element type of the KServe v2 protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// One byte per element, 0 or 1.
    Bool,
    /// Unsigned 8-bit integer.
    Uint8,
    /// Unsigned 16-bit integer.
    Uint16,
    /// Unsigned 32-bit integer.
    Uint32,
    /// Unsigned 64-bit integer.
    Uint64,
    /// Signed 8-bit integer.
    Int8,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// IEEE half precision.
    Fp16,
    /// IEEE single precision.
    Fp32,
    /// IEEE double precision.
    Fp64,
    /// bfloat16.
    Bf16,
    /// Variable-length byte strings, serialized as a 4-byte little-endian length + bytes.
    Bytes,
}

/// A spelling of at most seven bytes as one number: its bytes, little-endian, and its
/// length in the top byte (so a trailing NUL still differs). `None` when longer.
const fn spelling_word(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    if bytes.len() > 7 {
        return None;
    }
    let mut word = (bytes.len() as u64) << 56;
    let mut i = 0;
    while i < bytes.len() {
        word |= (bytes[i] as u64) << (8 * i);
        i += 1;
    }
    Some(word)
}

impl DataType {
    /// Every type, in protocol order.
    pub const ALL: [DataType; 14] = [
        DataType::Bool,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Fp64,
        DataType::Bf16,
        DataType::Bytes,
    ];

    /// The protocol spelling, e.g. `"FP32"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Uint8 => "UINT8",
            DataType::Uint16 => "UINT16",
            DataType::Uint32 => "UINT32",
            DataType::Uint64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
            DataType::Bf16 => "BF16",
            DataType::Bytes => "BYTES",
        }
    }

    /// Parses the protocol spelling; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        // Every request names a datatype per tensor: one number compared per type, not a
        // string each.
        const WORDS: [u64; 14] = {
            let mut words = [0; 14];
            let mut i = 0;
            while i < words.len() {
                words[i] = match spelling_word(DataType::ALL[i].as_str()) {
                    Some(word) => word,
                    None => panic!("a datatype's spelling is longer than seven bytes"),
                };
                i += 1;
            }
            words
        };
        let word = spelling_word(s)?;
        let at = WORDS.iter().position(|&w| w == word)?;
        Some(Self::ALL[at])
    }

    /// Bytes per element; `None` for variable-size `BYTES`.
    pub fn element_size(self) -> Option<usize> {
        match self {
            DataType::Bool | DataType::Uint8 | DataType::Int8 => Some(1),
            DataType::Uint16 | DataType::Int16 | DataType::Fp16 | DataType::Bf16 => Some(2),
            DataType::Uint32 | DataType::Int32 | DataType::Fp32 => Some(4),
            DataType::Uint64 | DataType::Int64 | DataType::Fp64 => Some(8),
            DataType::Bytes => None,
        }
    }

    /// The model-configuration enum value for this type.
    pub fn to_config(self) -> ConfigDataType {
        match self {
            DataType::Bool => ConfigDataType::TypeBool,
            DataType::Uint8 => ConfigDataType::TypeUint8,
            DataType::Uint16 => ConfigDataType::TypeUint16,
            DataType::Uint32 => ConfigDataType::TypeUint32,
            DataType::Uint64 => ConfigDataType::TypeUint64,
            DataType::Int8 => ConfigDataType::TypeInt8,
            DataType::Int16 => ConfigDataType::TypeInt16,
            DataType::Int32 => ConfigDataType::TypeInt32,
            DataType::Int64 => ConfigDataType::TypeInt64,
            DataType::Fp16 => ConfigDataType::TypeFp16,
            DataType::Fp32 => ConfigDataType::TypeFp32,
            DataType::Fp64 => ConfigDataType::TypeFp64,
            DataType::Bf16 => ConfigDataType::TypeBf16,
            DataType::Bytes => ConfigDataType::TypeString,
        }
    }

    /// The protocol type of a model-configuration type; `None` for `TYPE_INVALID`.
    pub fn from_config(t: ConfigDataType) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.to_config() == t)
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_round_trip() {
        for t in DataType::ALL {
            assert_eq!(DataType::parse(t.as_str()), Some(t));
            assert_eq!(DataType::from_config(t.to_config()), Some(t));
        }
        for near in [
            "FLOAT", "", "fp32", "FP3", "FP32\0", "\0FP32", "FP32 ", "UINT128", "BYTES!!!",
        ] {
            assert_eq!(DataType::parse(near), None, "{near:?}");
        }
        assert_eq!(DataType::from_config(ConfigDataType::TypeInvalid), None);
    }
}
