//! A small binary encoding of cache keys and cached outputs, for caches outside the process
//! (Redis). Every field is length-prefixed; decoding checks every length, so a corrupt or
//! foreign value is a miss, never a panic.

use bytes::Bytes;

use super::key::{CacheKey, KeyData, KeyInput};
use crate::request::OutputTensor;
use nereid_proto::DataType;

/// Format version, first byte of every value: a change of layout makes old entries misses.
const VERSION: u8 = 1;

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn tensor(&mut self, name: &str, datatype: DataType, shape: &[i64], data: &[u8]) {
        self.bytes(name.as_bytes());
        self.bytes(datatype.as_str().as_bytes());
        self.u64(shape.len() as u64);
        for d in shape {
            self.0.extend_from_slice(&d.to_le_bytes());
        }
        self.bytes(data);
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
    fn tensor(&mut self) -> Option<(String, DataType, Vec<i64>, Bytes)> {
        let name = self.string()?;
        let datatype = DataType::parse(std::str::from_utf8(self.bytes()?).ok()?)?;
        let rank = usize::try_from(self.u64()?).ok()?;
        let mut shape = Vec::with_capacity(rank.min(64));
        for _ in 0..rank {
            shape.push(i64::from_le_bytes(self.take(8)?.try_into().ok()?));
        }
        let data = Bytes::copy_from_slice(self.bytes()?);
        Some((name, datatype, shape, data))
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Encodes a key.
pub fn encode_key(key: &CacheKey) -> Vec<u8> {
    let mut w = Writer::default();
    w.0.push(VERSION);
    w.bytes(key.model.as_bytes());
    w.0.extend_from_slice(&key.version.to_le_bytes());
    w.u64(key.inputs.len() as u64);
    for i in &key.inputs {
        w.tensor(&i.name, i.datatype, &i.shape, &i.data);
    }
    w.0
}

/// Decodes a key; `None` when the bytes are not one.
pub fn decode_key(bytes: &[u8]) -> Option<CacheKey<'static>> {
    let (&version, rest) = bytes.split_first()?;
    if version != VERSION {
        return None;
    }
    let mut r = Reader(rest);
    let model = r.string()?;
    let version = i64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let count = usize::try_from(r.u64()?).ok()?;
    let mut inputs = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let (name, datatype, shape, data) = r.tensor()?;
        inputs.push(KeyInput {
            name: name.into(),
            datatype,
            shape: shape.into(),
            data: KeyData::Stored(data),
        });
    }
    r.done()
        .then(|| CacheKey::new(model.into(), version, inputs))
}

/// Encodes a response's outputs.
pub fn encode_outputs(outputs: &[OutputTensor]) -> Vec<u8> {
    let mut w = Writer::default();
    w.0.push(VERSION);
    w.u64(outputs.len() as u64);
    for o in outputs {
        w.tensor(&o.name, o.datatype, &o.shape, &o.data);
    }
    w.0
}

/// Decodes outputs; `None` when the bytes are not an encoding of them.
pub fn decode_outputs(bytes: &[u8]) -> Option<Vec<OutputTensor>> {
    let (&version, rest) = bytes.split_first()?;
    if version != VERSION {
        return None;
    }
    let mut r = Reader(rest);
    let count = usize::try_from(r.u64()?).ok()?;
    let mut outputs = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let (name, datatype, shape, data) = r.tensor()?;
        outputs.push(OutputTensor {
            name,
            datatype,
            shape,
            data,
            device: None,
        });
    }
    r.done().then_some(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CacheKey<'static> {
        CacheKey::new(
            "m".into(),
            3,
            vec![KeyInput {
                name: "IN".into(),
                datatype: DataType::Fp32,
                shape: vec![1, 2].into(),
                data: KeyData::Shared(Bytes::from_static(&[0, 0, 128, 63, 0, 0, 0, 64])),
            }],
        )
    }

    #[test]
    fn keys_and_outputs_round_trip() {
        let k = key();
        assert_eq!(decode_key(&encode_key(&k)), Some(k));
        let outputs = vec![OutputTensor {
            name: "OUT".into(),
            datatype: DataType::Bytes,
            shape: vec![1],
            data: Bytes::from_static(b"\x02\0\0\0hi"),
            device: None,
        }];
        assert_eq!(decode_outputs(&encode_outputs(&outputs)), Some(outputs));
    }

    #[test]
    fn corrupt_values_decode_to_none() {
        let encoded = encode_key(&key());
        for cut in 0..encoded.len() {
            assert_eq!(decode_key(&encoded[..cut]), None, "cut at {cut}");
        }
        let mut wrong_version = encoded.clone();
        wrong_version[0] = 99;
        assert_eq!(decode_key(&wrong_version), None);
        assert_eq!(
            decode_outputs(&[VERSION, 255, 255, 255, 255, 255, 255, 255, 255]),
            None
        );
    }
}
