//! Input data generation (and the datatype type it works with).
//!
//! Data is made once per run from a seeded PRNG (SplitMix64: tiny, fast and good enough for
//! filling tensors), so two runs with the same seed send byte-identical requests.

use bytes::Bytes;

use crate::cli::InputData;

/// The protocol's tensor datatypes (shared with the server, so the two cannot disagree).
pub use nereid_proto::DataType;

/// SplitMix64: a seeded 64-bit generator.
#[derive(Clone, Debug)]
pub struct Prng(u64);

impl Prng {
    /// A generator whose output depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        // 53 random mantissa bits; the conversion is exact.
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `0..n` (`n > 0`); the modulo bias is irrelevant for test data.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Characters of random BYTES elements: alphanumeric, so ONNX string tensors (UTF-8) take them.
const ALPHANUMERIC: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Makes the raw bytes of a tensor of `elements` elements, as the binary tensor extension
/// and gRPC `raw_input_contents` carry it (little-endian; BYTES length-prefixed).
///
/// Random integers lie in 0..=100 and floats in [0, 1): values any model accepts, e.g. as
/// indices into small tables, and that stay finite through typical arithmetic.
pub fn generate(datatype: DataType, elements: usize, mode: InputData, rng: &mut Prng) -> Bytes {
    let mut out = Vec::with_capacity(elements * datatype.element_size().unwrap_or(12));
    for _ in 0..elements {
        let random = mode == InputData::Random;
        let int = if random { rng.below(101) } else { 0 };
        let float = if random { rng.next_f64() } else { 0.0 };
        match datatype {
            DataType::Bool => out.push(u8::from(random && rng.below(2) == 1)),
            DataType::Uint8 | DataType::Int8 => out.push(int as u8),
            DataType::Uint16 | DataType::Int16 => {
                out.extend_from_slice(&(int as u16).to_le_bytes())
            }
            DataType::Uint32 | DataType::Int32 => {
                out.extend_from_slice(&(int as u32).to_le_bytes())
            }
            DataType::Uint64 | DataType::Int64 => out.extend_from_slice(&int.to_le_bytes()),
            DataType::Fp16 => {
                out.extend_from_slice(&half::f16::from_f64(float).to_bits().to_le_bytes());
            }
            DataType::Bf16 => {
                out.extend_from_slice(&half::bf16::from_f64(float).to_bits().to_le_bytes());
            }
            DataType::Fp32 => out.extend_from_slice(&(float as f32).to_le_bytes()),
            DataType::Fp64 => out.extend_from_slice(&float.to_le_bytes()),
            DataType::Bytes => {
                if random {
                    let len = 4 + rng.below(9) as usize;
                    out.extend_from_slice(&(len as u32).to_le_bytes());
                    for _ in 0..len {
                        let i = rng.below(ALPHANUMERIC.len() as u64) as usize;
                        out.push(ALPHANUMERIC[i]);
                    }
                } else {
                    out.extend_from_slice(&1u32.to_le_bytes());
                    out.push(b'0');
                }
            }
        }
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_names_round_trip() {
        for name in [
            "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
            "FP16", "BF16", "FP32", "FP64", "BYTES",
        ] {
            let dt = DataType::parse(name).expect("known datatype");
            assert_eq!(dt.as_str(), name);
        }
        assert_eq!(DataType::parse("FLOAT"), None);
    }

    #[test]
    fn fixed_size_data_has_the_right_length_and_is_seeded() {
        let a = generate(DataType::Fp32, 10, InputData::Random, &mut Prng::new(7));
        let b = generate(DataType::Fp32, 10, InputData::Random, &mut Prng::new(7));
        let c = generate(DataType::Fp32, 10, InputData::Random, &mut Prng::new(8));
        assert_eq!(a.len(), 40);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let z = generate(DataType::Int64, 3, InputData::Zero, &mut Prng::new(7));
        assert_eq!(z.as_ref(), &[0u8; 24]);
    }

    #[test]
    fn bytes_elements_are_length_prefixed_strings() {
        let data = generate(DataType::Bytes, 5, InputData::Random, &mut Prng::new(1));
        let mut rest = data.as_ref();
        for _ in 0..5 {
            let (len, tail) = rest.split_at(4);
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            assert!((4..=12).contains(&len));
            assert!(tail[..len].iter().all(u8::is_ascii_alphanumeric));
            rest = &tail[len..];
        }
        assert!(rest.is_empty());
    }

    #[test]
    fn random_floats_are_in_unit_interval() {
        let mut rng = Prng::new(3);
        assert!((0..1000)
            .map(|_| rng.next_f64())
            .all(|v| (0.0..1.0).contains(&v)));
    }
}
