//! Which cache the server uses and its settings, as tritonserver receives them: a name
//! plus string key/value pairs from `--cache-config <name>,<key>=<value>` flags, or a
//! name plus a JSON object from `TRITONSERVER_ServerOptionsSetCacheConfig`. Each store
//! reads its own keys; cache plugins receive the pairs back as JSON.

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A cache name and its settings (all values strings, as Triton passes them on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// `local`, `redis`, or the name of a TRITONCACHE library.
    pub name: String,
    /// The `<key>=<value>` settings.
    pub settings: BTreeMap<String, String>,
}

impl CacheConfig {
    /// The cache the `--cache-config` flags (or the deprecated
    /// `--response-cache-byte-size`) ask for, with tritonserver's messages for malformed
    /// flags; `None` when neither is given.
    pub fn from_flags(flags: &[String], deprecated_size: Option<u64>) -> Result<Option<Self>> {
        let flags = match (flags.is_empty(), deprecated_size) {
            (false, Some(_)) => return Err(Error::invalid_arg(
                "Incompatible flags --response-cache-byte-size and --cache-config both provided. Please provide one or the other.",
            )),
            (true, Some(size)) => {
                tracing::warn!(
                    "--response-cache-byte-size is deprecated; use --cache-config local,size={size}"
                );
                vec![format!("local,size={size}")]
            }
            (true, None) => return Ok(None),
            (false, None) => flags.to_vec(),
        };
        let mut config: Option<Self> = None;
        for flag in &flags {
            let (cache, setting) = flag.split_once(',').ok_or_else(|| {
                Error::invalid_arg(format!("No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got {flag}"))
            })?;
            let (key, value) = setting
                .split_once('=')
                .filter(|(k, v)| !cache.is_empty() && !k.is_empty() && !v.is_empty())
                .ok_or_else(|| {
                    Error::invalid_arg(format!(
                        "--cache-config option format is '<cache name>,<setting>=<value>'. Got {flag}"
                    ))
                })?;
            let config = config.get_or_insert_with(|| Self {
                name: cache.to_string(),
                settings: BTreeMap::new(),
            });
            if config.name != cache {
                return Err(Error::invalid_arg(
                    "found multiple cache configurations, but only a single cache is currently supported",
                ));
            }
            config.settings.insert(key.to_string(), value.to_string());
        }
        Ok(config)
    }

    /// The cache `name` configured with `json`, a JSON object whose values are strings,
    /// numbers or booleans (an in-process caller's `TRITONSERVER_ServerOptionsSetCacheConfig`).
    pub fn from_json(name: &str, json: &str) -> Result<Self> {
        let invalid = |why: String| {
            Error::invalid_arg(format!(
                "failed to parse the configuration of cache '{name}': {why}"
            ))
        };
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
        let mut settings = BTreeMap::new();
        for (key, value) in object {
            let text = match value {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                other => return Err(invalid(format!("'{key}' has a non-scalar value {other}"))),
            };
            settings.insert(key, text);
        }
        Ok(Self {
            name: name.to_string(),
            settings,
        })
    }

    /// The settings as the JSON object a TRITONCACHE library's `TRITONCACHE_CacheInitialize`
    /// receives: every value a string, as tritonserver writes it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.settings).expect("a map of strings always serializes")
    }

    /// Setting `key` as a number, `None` when absent; `cache` names the implementation in
    /// the message for a value that is not a number (Triton's `LocalCache`, `RedisCache`).
    pub fn number<T: FromStr>(&self, key: &str, cache: &str) -> Result<Option<T>> {
        self.settings
            .get(key)
            .map(|v| {
                v.trim().parse::<T>().map_err(|_| {
                    Error::invalid_arg(format!(
                        "Failed to initialize {cache}: '{key}' must be a number, got '{v}'"
                    ))
                })
            })
            .transpose()
    }

    /// Warns about settings the cache does not know (Triton ignores them silently).
    pub fn warn_unknown(&self, known: &[&str]) {
        for key in self
            .settings
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
        {
            tracing::warn!(
                "--cache-config: the {} cache has no setting '{key}'; ignored",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_collect_one_cache_and_its_settings() {
        let config = CacheConfig::from_flags(&flags(&["redis,host=h", "redis,port=1"]), None)
            .expect("valid")
            .expect("a cache");
        assert_eq!(config.name, "redis");
        assert_eq!(config.to_json(), r#"{"host":"h","port":"1"}"#);
        assert_eq!(CacheConfig::from_flags(&[], None).expect("valid"), None);
        let deprecated = CacheConfig::from_flags(&[], Some(4096)).expect("valid");
        assert_eq!(deprecated.expect("local").settings["size"], "4096");
    }

    #[test]
    fn malformed_flags_get_tritonservers_messages() {
        let message = |list: &[&str], size| {
            CacheConfig::from_flags(&flags(list), size)
                .expect_err("invalid")
                .message()
                .to_string()
        };
        assert!(message(&["local"], None).starts_with("No cache specified."));
        assert!(message(&["local,size"], None).starts_with("--cache-config option format is"));
        assert!(message(&["local,size=1", "redis,host=h"], None).starts_with("found multiple"));
        assert!(message(&["local,size=1"], Some(1)).starts_with("Incompatible flags"));
    }

    #[test]
    fn json_values_become_strings() {
        let config =
            CacheConfig::from_json("local", r#"{"size": 1048576, "x": true}"#).expect("valid");
        assert_eq!(config.settings["size"], "1048576");
        assert_eq!(
            config.number::<usize>("size", "LocalCache").expect("n"),
            Some(1048576)
        );
        assert!(config.number::<usize>("x", "LocalCache").is_err());
        assert!(CacheConfig::from_json("local", "[1]").is_err());
        assert!(CacheConfig::from_json("local", r#"{"a": {}}"#).is_err());
    }
}
