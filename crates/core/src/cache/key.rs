//! What identifies a cached response: model name, model version, and every input's name,
//! datatype, shape and bytes (inputs in name order, so the order a client listed them in
//! does not matter). Triton hashes only names and bytes and never compares keys; here the
//! hash only picks a bucket and the whole key is compared, so a hash collision can never
//! hand one request another request's answer.
//!
//! A lookup's key borrows everything from the request (one allocation: the input list);
//! only a key that is kept — stored, or waited on by identical requests — owns copies.

use std::borrow::Cow;
use std::ops::Deref;

use bytes::Bytes;
use xxhash_rust::xxh3::Xxh3;

use crate::request::InferRequest;
use nereid_proto::DataType;

/// An input's bytes as a key holds them; keys compare the bytes whatever the variant.
#[derive(Debug, Clone)]
pub enum KeyData<'a> {
    /// Borrowed from the request being looked up.
    Borrowed(&'a [u8]),
    /// Shared with a buffer that may be the request's own (an HTTP body, a shared-memory
    /// region the client will overwrite): copied when the key is stored.
    Shared(Bytes),
    /// A compact copy the key owns, kept as it is when stored again.
    Stored(Bytes),
}

impl Deref for KeyData<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            KeyData::Borrowed(bytes) => bytes,
            KeyData::Shared(bytes) | KeyData::Stored(bytes) => bytes,
        }
    }
}

impl PartialEq for KeyData<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for KeyData<'_> {}

impl KeyData<'_> {
    /// The bytes as a stored key keeps them: its own compact copy.
    fn to_stored(&self) -> KeyData<'static> {
        match self {
            KeyData::Stored(bytes) => KeyData::Stored(bytes.clone()),
            other => KeyData::Stored(Bytes::copy_from_slice(other)),
        }
    }
}

/// One input as it takes part in the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInput<'a> {
    /// Input name.
    pub name: Cow<'a, str>,
    /// Datatype.
    pub datatype: DataType,
    /// Shape.
    pub shape: Cow<'a, [i64]>,
    /// Bytes.
    pub data: KeyData<'a>,
}

/// The full cache key of a request. Equality compares everything (the stored 64-bit hash
/// first, as a quick way to tell most different keys apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey<'a> {
    /// Model name.
    pub model: Cow<'a, str>,
    /// The version that answers (not the requested "latest").
    pub version: i64,
    /// Inputs sorted by name.
    pub inputs: Vec<KeyInput<'a>>,
    hash: u64,
}

impl<'a> CacheKey<'a> {
    /// A key from its parts (inputs are sorted by name here).
    pub fn new(model: Cow<'a, str>, version: i64, mut inputs: Vec<KeyInput<'a>>) -> Self {
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

    /// The key of `request` for `model` version `version`, borrowing from both.
    pub fn of(model: &'a str, version: i64, request: &'a InferRequest) -> Self {
        let inputs: Vec<KeyInput<'a>> = request
            .inputs
            .iter()
            .map(|i| KeyInput {
                name: Cow::Borrowed(i.name.as_str()),
                datatype: i.datatype,
                shape: Cow::Borrowed(i.shape.as_slice()),
                data: KeyData::Borrowed(&i.data),
            })
            .collect();
        Self::new(Cow::Borrowed(model), version, inputs)
    }

    /// A copy that owns everything, with compact copies of its bytes, for keeping: the
    /// request's buffers may be a whole HTTP body or a shared-memory region that the
    /// client will overwrite.
    pub fn to_stored(&self) -> CacheKey<'static> {
        CacheKey {
            model: Cow::Owned(self.model.to_string()),
            version: self.version,
            inputs: self
                .inputs
                .iter()
                .map(|i| KeyInput {
                    name: Cow::Owned(i.name.to_string()),
                    datatype: i.datatype,
                    shape: Cow::Owned(i.shape.to_vec()),
                    data: i.data.to_stored(),
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
            for d in input.shape.iter() {
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
