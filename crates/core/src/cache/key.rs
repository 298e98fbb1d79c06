//! What identifies a cached response: model name, model version, and every input's name,
//! datatype, shape and bytes (inputs in name order, so the order a client listed them in
//! does not matter). Triton hashes only names and bytes and never compares keys; here the
//! hash only picks a bucket and the whole key is compared, so a hash collision can never
//! hand one request another request's answer.

use bytes::Bytes;
use xxhash_rust::xxh3::Xxh3;

use crate::request::InferRequest;
use crate::DataType;

/// One input as it takes part in the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInput {
    /// Input name.
    pub name: String,
    /// Datatype.
    pub datatype: DataType,
    /// Shape.
    pub shape: Vec<i64>,
    /// Bytes (borrowed from the request until the key is stored).
    pub data: Bytes,
}

/// The full cache key of a request. Equality compares everything (the stored 64-bit hash
/// first, as a quick way to tell most different keys apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    /// Model name.
    pub model: String,
    /// The version that answers (not the requested "latest").
    pub version: i64,
    /// Inputs sorted by name.
    pub inputs: Vec<KeyInput>,
    hash: u64,
}

impl CacheKey {
    /// A key from its parts (inputs are sorted by name here).
    pub fn new(model: String, version: i64, mut inputs: Vec<KeyInput>) -> Self {
        inputs.sort_by(|a, b| a.name.cmp(&b.name));
        let mut key = Self {
            model,
            version,
            inputs,
            hash: 0,
        };
        let mut h = Xxh3::new();
        key.feed(&mut h);
        key.hash = h.digest();
        key
    }

    /// The key of `request` for `model` version `version`. Borrows the input bytes.
    pub fn of(model: &str, version: i64, request: &InferRequest) -> Self {
        let inputs: Vec<KeyInput> = request
            .inputs
            .iter()
            .map(|i| KeyInput {
                name: i.name.clone(),
                datatype: i.datatype,
                shape: i.shape.clone(),
                data: i.data.clone(),
            })
            .collect();
        Self::new(model.to_string(), version, inputs)
    }

    /// A copy that owns compact copies of its bytes, for storing: the request's buffers
    /// may be a whole HTTP body or a shared-memory region that the client will overwrite.
    pub fn to_stored(&self) -> Self {
        Self {
            model: self.model.clone(),
            version: self.version,
            inputs: self
                .inputs
                .iter()
                .map(|i| KeyInput {
                    data: Bytes::copy_from_slice(&i.data),
                    ..i.clone()
                })
                .collect(),
            hash: self.hash,
        }
    }

    fn feed(&self, h: &mut Xxh3) {
        let field = |h: &mut Xxh3, bytes: &[u8]| {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(h, self.model.as_bytes());
        h.update(&self.version.to_le_bytes());
        for input in &self.inputs {
            field(h, input.name.as_bytes());
            field(h, input.datatype.as_str().as_bytes());
            h.update(&(input.shape.len() as u64).to_le_bytes());
            for d in &input.shape {
                h.update(&d.to_le_bytes());
            }
            field(h, &input.data);
        }
    }

    /// 64-bit hash (computed once): the local cache's bucket.
    pub fn hash64(&self) -> u64 {
        self.hash
    }

    /// 128-bit hash: the Redis key name (the stored key is still compared in full).
    pub fn hash128(&self) -> u128 {
        let mut h = Xxh3::new();
        self.feed(&mut h);
        h.digest128()
    }

    /// Bytes the key occupies when stored (for the local cache's size accounting).
    pub fn stored_size(&self) -> usize {
        self.model.len()
            + 8
            + self
                .inputs
                .iter()
                .map(|i| i.name.len() + 8 * i.shape.len() + i.data.len() + 48)
                .sum::<usize>()
    }
}
