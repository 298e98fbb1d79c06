//! [`PluginStore`]: a TRITONCACHE library behind Nereid's [`CacheStore`] trait. The plugin
//! sees a key made from the full key's 128-bit hash; the entry it stores holds the full
//! key and the outputs, and a lookup compares the stored key in full, so a hash collision
//! is a miss, never another request's answer.
//!
//! Plugin calls are plain synchronous calls made inline on the calling task: Triton's
//! plugins keep entries in memory, so a call costs a copy under a lock (microseconds),
//! less than a hop to a blocking thread would; `block_in_place` would also panic on a
//! current-thread runtime. A plugin that talks to the network would stall a worker for its
//! round trip.

use std::ffi::CString;
use std::sync::Arc;

use futures::future::{self, BoxFuture, FutureExt};
use nereid_core::cache::codec::{decode_key, decode_outputs, encode_key, encode_outputs};
use nereid_core::cache::key::CacheKey;
use nereid_core::cache::{CacheStore, CachedOutputs};
use nereid_core::{Error, Result};

use super::library::CacheLibrary;

/// A response cache kept by a TRITONCACHE library.
pub struct PluginStore {
    name: String,
    library: CacheLibrary,
}

impl PluginStore {
    /// A store over an initialized library; `name` is the cache's name (`--cache-config`).
    pub fn new(name: String, library: CacheLibrary) -> Self {
        Self { name, library }
    }

    /// The plugin's key for `key`: its 128-bit hash in hex.
    fn plugin_key(key: &CacheKey) -> CString {
        let text = format!("{:032x}", key.hash128());
        CString::new(text).unwrap_or_default()
    }

    /// The outputs of a stored entry, when it is one of ours and holds exactly `key`.
    fn decode(&self, key: &CacheKey, buffers: &[Vec<u8>]) -> Option<CachedOutputs> {
        let [stored_key, outputs] = buffers else {
            tracing::warn!(
                "cache '{}' answered an entry of {} buffers; treated as a miss",
                self.name,
                buffers.len()
            );
            return None;
        };
        if decode_key(stored_key).as_ref() != Some(key) {
            tracing::debug!("cache '{}': hash collision, treated as a miss", self.name);
            return None;
        }
        decode_outputs(outputs).map(Arc::new)
    }

    fn lookup_now(&self, key: &CacheKey) -> Option<CachedOutputs> {
        match self.library.lookup(&Self::plugin_key(key)) {
            Ok(Some(buffers)) => self.decode(key, &buffers),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("cache '{}' lookup failed: {}", self.name, e.message());
                None
            }
        }
    }

    fn insert_now(&self, key: &CacheKey, outputs: &CachedOutputs) -> Result<()> {
        let buffers = vec![encode_key(key), encode_outputs(outputs)];
        self.library
            .insert(&Self::plugin_key(key), buffers)
            .map_err(|e| Error::new(e.kind(), format!("cache '{}': {}", self.name, e.message())))
    }
}

impl CacheStore for PluginStore {
    fn lookup<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Option<CachedOutputs>> {
        future::ready(self.lookup_now(key)).boxed()
    }

    fn insert<'a>(
        &'a self,
        key: &'a CacheKey,
        outputs: &'a CachedOutputs,
    ) -> BoxFuture<'a, Result<()>> {
        future::ready(self.insert_now(key, outputs)).boxed()
    }

    fn describe(&self) -> String {
        format!(
            "{} (cache library {})",
            self.name,
            self.library.path().display()
        )
    }
}
