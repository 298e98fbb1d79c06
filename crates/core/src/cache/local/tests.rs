use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::cache::key::{KeyData, KeyInput};
use crate::request::OutputTensor;
use nereid_proto::DataType;

fn key(model: &str, data: &[u8], shape: Vec<i64>, datatype: DataType) -> CacheKey<'static> {
    CacheKey::new(
        model.to_string().into(),
        1,
        vec![KeyInput {
            name: "IN".into(),
            datatype,
            shape: shape.into(),
            data: KeyData::Shared(Bytes::copy_from_slice(data)),
        }],
    )
}

/// Four keys of one model that differ only in their one input byte.
fn four_keys() -> Vec<CacheKey<'static>> {
    (0..4u8)
        .map(|i| key("m", &[i], vec![1], DataType::Uint8))
        .collect()
}

fn outputs(fill: u8, len: usize) -> CachedOutputs {
    Arc::new(vec![OutputTensor {
        name: "OUT".into(),
        datatype: DataType::Uint8,
        shape: vec![len as i64],
        data: Bytes::from(vec![fill; len]),
        device: None,
    }])
}

fn cache(size: usize, hasher: KeyHasher) -> LocalCache {
    LocalCache::with_hasher(size, hasher).expect("cache")
}

#[test]
fn colliding_keys_never_share_an_answer() {
    // Every key lands in the same bucket: only the full-key comparison tells them apart.
    let cache = cache(1 << 20, |_| 42);
    let a = key("m", &[1, 2, 3, 4], vec![4], DataType::Uint8);
    let b = key("m", &[1, 2, 3, 5], vec![4], DataType::Uint8);
    let same_bytes_other_shape = key("m", &[1, 2, 3, 4], vec![2, 2], DataType::Uint8);
    let same_bytes_other_type = key("m", &[1, 2, 3, 4], vec![4], DataType::Int8);
    cache.insert(&a, outputs(1, 8)).expect("insert a");
    for other in [&b, &same_bytes_other_shape, &same_bytes_other_type] {
        assert!(cache.lookup(other).is_none(), "{other:?} must miss");
    }
    cache.insert(&b, outputs(2, 8)).expect("insert b");
    assert_eq!(cache.lookup(&a).expect("a")[0].data[0], 1);
    assert_eq!(cache.lookup(&b).expect("b")[0].data[0], 2);
}

#[test]
fn least_recently_used_is_evicted_and_budget_holds() {
    let cache = cache(4096, |key| key.hash64());
    let keys = four_keys();
    for k in &keys[..3] {
        cache.insert(k, outputs(0, 900)).expect("insert");
    }
    // Touch the oldest so that the second-oldest is evicted next.
    assert!(cache.lookup(&keys[0]).is_some());
    cache.insert(&keys[3], outputs(0, 900)).expect("insert");
    assert!(cache.lookup(&keys[0]).is_some());
    assert!(cache.lookup(&keys[1]).is_none(), "LRU entry evicted");
    assert!(cache.lookup(&keys[3]).is_some());
    let state = cache.state.lock();
    assert!(state.used <= 4096, "used {} over the budget", state.used);
    assert_eq!(state.entries.len(), state.recency.len());
}

#[test]
fn repeated_hits_on_the_newest_entry_keep_the_recency_order() {
    let cache = cache(4096, |key| key.hash64());
    let keys = four_keys();
    cache.insert(&keys[0], outputs(0, 900)).expect("insert");
    // The first entry is the newest: hits on it move nothing, and it stays listed.
    for _ in 0..3 {
        assert!(cache.lookup(&keys[0]).is_some());
    }
    cache.insert(&keys[1], outputs(0, 900)).expect("insert");
    cache.insert(&keys[2], outputs(0, 900)).expect("insert");
    assert!(cache.lookup(&keys[1]).is_some());
    assert!(cache.lookup(&keys[1]).is_some());
    cache.insert(&keys[3], outputs(0, 900)).expect("insert");
    assert!(
        cache.lookup(&keys[0]).is_none(),
        "the least recently used goes first"
    );
    for k in &keys[1..] {
        assert!(cache.lookup(k).is_some());
    }
    let state = cache.state.lock();
    assert_eq!(state.entries.len(), state.recency.len());
}

#[test]
fn too_large_entries_and_too_small_caches_are_refused() {
    let cache = cache(2048, |key| key.hash64());
    let k = key("m", &[0], vec![1], DataType::Uint8);
    let e = cache.insert(&k, outputs(0, 4096)).expect_err("too large");
    assert!(
        e.message().starts_with("Requested byte_size: "),
        "{}",
        e.message()
    );
    assert!(cache.lookup(&k).is_none());
    assert!(LocalCache::new(100).is_err());
}

#[test]
fn stored_keys_do_not_alias_the_request_buffers() {
    let cache = cache(1 << 16, |key| key.hash64());
    let body = Bytes::from(vec![7u8; 1000]);
    let k = CacheKey::new(
        "m".into(),
        1,
        vec![KeyInput {
            name: "IN".into(),
            datatype: DataType::Uint8,
            shape: vec![4].into(),
            data: KeyData::Shared(body.slice(10..14)),
        }],
    );
    cache.insert(&k, outputs(3, 4)).expect("insert");
    let state = cache.state.lock();
    let stored = &state.entries.values().next().expect("entry").key;
    assert_eq!(stored.inputs[0].data.len(), 4);
    assert_ne!(stored.inputs[0].data.as_ptr(), k.inputs[0].data.as_ptr());
}
