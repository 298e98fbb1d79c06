//! `--cache-config <cache>,<key>=<value>` settings turned into a cache choice, with the
//! keys and defaults of Triton's `local` and `redis` cache implementations.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};

/// Which cache the server uses.
#[derive(Debug, Clone, PartialEq)]
pub enum CacheSettings {
    /// In-process, `size` bytes.
    Local {
        /// Byte budget.
        size: usize,
    },
    /// A Redis server.
    Redis(RedisSettings),
}

/// The redis cache's connection settings (Triton's `redis_cache` keys).
#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    /// `host`.
    pub host: String,
    /// `port`.
    pub port: u16,
    /// `user` (default `default`, or `TRITONCACHE_REDIS_USERNAME`).
    pub user: String,
    /// `password` (or `TRITONCACHE_REDIS_PASSWORD`).
    pub password: Option<String>,
    /// `db` (default 0).
    pub db: i64,
    /// `connect_timeout` in ms; `None` (0) waits without limit, as in Triton.
    pub connect_timeout: Option<Duration>,
    /// `socket_timeout` in ms; `None` (0) waits without limit.
    pub socket_timeout: Option<Duration>,
    /// `pool_size` (default 1): connections used round-robin.
    pub pool_size: usize,
    /// `wait_timeout` in ms (default 1000): the longest a request waits for Redis.
    pub wait_timeout: Duration,
}

const LOCAL_KEYS: &[&str] = &["size"];
const REDIS_KEYS: &[&str] = &[
    "host",
    "port",
    "user",
    "password",
    "db",
    "connect_timeout",
    "socket_timeout",
    "pool_size",
    "wait_timeout",
    "tls_enabled",
    "cert",
    "key",
    "cacert",
    "cacert_dir",
    "sni",
];
const TLS_KEYS: &[&str] = &["cert", "key", "cacert", "cacert_dir", "sni"];

fn number<T: std::str::FromStr>(
    values: &BTreeMap<String, String>,
    key: &str,
    cache: &str,
) -> Result<Option<T>> {
    values
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

fn millis(ms: Option<u64>) -> Option<Duration> {
    ms.filter(|ms| *ms > 0).map(Duration::from_millis)
}

impl CacheSettings {
    /// Settings for cache `name` with `values` (all strings, as Triton passes them).
    /// `env` reads environment variables (the redis cache's credentials).
    pub fn parse(
        name: &str,
        values: &BTreeMap<String, String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let known = match name {
            "local" => LOCAL_KEYS,
            "redis" => REDIS_KEYS,
            other => {
                return Err(Error::invalid_arg(format!(
                    "unknown cache '{other}': nereid has the 'local' and 'redis' caches"
                )))
            }
        };
        for key in values.keys().filter(|k| !known.contains(&k.as_str())) {
            tracing::warn!("--cache-config: the {name} cache has no setting '{key}'; ignored");
        }
        match name {
            "local" => {
                let size = number::<usize>(values, "size", "LocalCache")
                    .ok()
                    .flatten()
                    .ok_or_else(|| {
                        Error::invalid_arg(
                            "Failed to initialize LocalCache: config didn't contain a valid 'size' field.",
                        )
                    })?;
                Ok(CacheSettings::Local { size })
            }
            _ => Self::redis(values, env),
        }
    }

    fn redis(
        values: &BTreeMap<String, String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        const CACHE: &str = "RedisCache";
        let (Some(host), Some(port)) = (values.get("host"), number::<u16>(values, "port", CACHE)?)
        else {
            return Err(Error::invalid_arg(
                "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify 'host' and 'port' in the configuration - e.g. tritonserver --cache-config redis,host=redis --cache-config redis,port=6379 --model-repository=/models ...",
            ));
        };
        let tls = values
            .get("tls_enabled")
            .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        if tls || TLS_KEYS.iter().any(|k| values.contains_key(*k)) {
            return Err(Error::unsupported(
                "Failed to initialize RedisCache: TLS connections to Redis (tls_enabled, cert, key, cacert, cacert_dir, sni) are not supported by this version of nereid",
            ));
        }
        let user = values
            .get("user")
            .cloned()
            .or_else(|| env("TRITONCACHE_REDIS_USERNAME"))
            .unwrap_or_else(|| "default".to_string());
        let password = values
            .get("password")
            .cloned()
            .or_else(|| env("TRITONCACHE_REDIS_PASSWORD"));
        let pool_size = number::<usize>(values, "pool_size", CACHE)?.unwrap_or(1);
        if pool_size == 0 {
            return Err(Error::invalid_arg(
                "Failed to initialize RedisCache: 'pool_size' must be at least 1",
            ));
        }
        Ok(CacheSettings::Redis(RedisSettings {
            host: host.clone(),
            port,
            user,
            password,
            db: number(values, "db", CACHE)?.unwrap_or(0),
            connect_timeout: millis(number(values, "connect_timeout", CACHE)?),
            socket_timeout: millis(number(values, "socket_timeout", CACHE)?),
            pool_size,
            wait_timeout: millis(number(values, "wait_timeout", CACHE)?)
                .unwrap_or(Duration::from_millis(1000)),
        }))
    }
}

/// Percent-encodes a URL user-info part.
fn encode(part: &str) -> String {
    part.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl RedisSettings {
    /// `host:port`, for messages.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The connection URL (credentials only when a password is set).
    pub fn url(&self) -> String {
        let auth = match &self.password {
            Some(password) => format!("{}:{}@", encode(&self.user), encode(password)),
            None => String::new(),
        };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("redis://{auth}{host}:{}/{}", self.port, self.db)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn local_needs_a_size() {
        let e = CacheSettings::parse("local", &values(&[]), |_| None).expect_err("no size");
        assert_eq!(
            e.message(),
            "Failed to initialize LocalCache: config didn't contain a valid 'size' field."
        );
        let s = CacheSettings::parse("local", &values(&[("size", "4096")]), |_| None);
        assert_eq!(s.expect("size"), CacheSettings::Local { size: 4096 });
    }

    #[test]
    fn redis_defaults_env_and_overrides() {
        let e = CacheSettings::parse("redis", &values(&[("host", "h")]), |_| None)
            .expect_err("no port");
        assert!(e
            .message()
            .starts_with("Failed to initialize RedisCache, didn't specify address"));
        let env = |k: &str| match k {
            "TRITONCACHE_REDIS_USERNAME" => Some("envuser".to_string()),
            "TRITONCACHE_REDIS_PASSWORD" => Some("env pw".to_string()),
            _ => None,
        };
        let CacheSettings::Redis(r) = CacheSettings::parse(
            "redis",
            &values(&[("host", "h"), ("port", "6380"), ("password", "p@ss")]),
            env,
        )
        .expect("redis") else {
            panic!("not redis")
        };
        assert_eq!(r.user, "envuser");
        assert_eq!(r.password.as_deref(), Some("p@ss"));
        assert_eq!(r.pool_size, 1);
        assert_eq!(r.wait_timeout, Duration::from_millis(1000));
        assert_eq!(r.connect_timeout, None);
        assert_eq!(r.url(), "redis://envuser:p%40ss@h:6380/0");
    }

    #[test]
    fn tls_and_unknown_caches_are_refused() {
        let tls = values(&[("host", "h"), ("port", "1"), ("tls_enabled", "true")]);
        assert!(CacheSettings::parse("redis", &tls, |_| None).is_err());
        assert!(CacheSettings::parse("memcached", &values(&[]), |_| None).is_err());
    }
}
