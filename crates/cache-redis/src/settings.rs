//! The redis cache's settings: Triton's `redis_cache` keys and defaults, read from the
//! `--cache-config redis,<key>=<value>` pairs.

use std::time::Duration;

use nereid_core::cache::CacheConfig;
use nereid_core::{Error, Result};

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

fn millis(ms: Option<u64>) -> Option<Duration> {
    ms.filter(|ms| *ms > 0).map(Duration::from_millis)
}

impl RedisSettings {
    /// The settings `--cache-config redis,...` gives, with Triton's messages; `env` reads
    /// the credentials' environment variables (`TRITONCACHE_REDIS_USERNAME`/`_PASSWORD`).
    pub fn from_config(config: &CacheConfig, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        config.warn_unknown(REDIS_KEYS);
        let values = &config.settings;
        const CACHE: &str = "RedisCache";
        let (Some(host), Some(port)) = (values.get("host"), config.number::<u16>("port", CACHE)?)
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
        let pool_size = config.number::<usize>("pool_size", CACHE)?.unwrap_or(1);
        if pool_size == 0 {
            return Err(Error::invalid_arg(
                "Failed to initialize RedisCache: 'pool_size' must be at least 1",
            ));
        }
        Ok(RedisSettings {
            host: host.clone(),
            port,
            user,
            password,
            db: config.number("db", CACHE)?.unwrap_or(0),
            connect_timeout: millis(config.number("connect_timeout", CACHE)?),
            socket_timeout: millis(config.number("socket_timeout", CACHE)?),
            pool_size,
            wait_timeout: millis(config.number("wait_timeout", CACHE)?)
                .unwrap_or(Duration::from_millis(1000)),
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(pairs: &[(&str, &str)]) -> CacheConfig {
        CacheConfig {
            name: "redis".to_string(),
            settings: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn redis_defaults_env_and_overrides() {
        let e =
            RedisSettings::from_config(&redis(&[("host", "h")]), |_| None).expect_err("no port");
        assert!(e
            .message()
            .starts_with("Failed to initialize RedisCache, didn't specify address"));
        let env = |k: &str| match k {
            "TRITONCACHE_REDIS_USERNAME" => Some("envuser".to_string()),
            "TRITONCACHE_REDIS_PASSWORD" => Some("env pw".to_string()),
            _ => None,
        };
        let r = RedisSettings::from_config(
            &redis(&[("host", "h"), ("port", "6380"), ("password", "p@ss")]),
            env,
        )
        .expect("redis");
        assert_eq!(r.user, "envuser");
        assert_eq!(r.password.as_deref(), Some("p@ss"));
        assert_eq!(r.pool_size, 1);
        assert_eq!(r.wait_timeout, Duration::from_millis(1000));
        assert_eq!(r.connect_timeout, None);
        assert_eq!(r.url(), "redis://envuser:p%40ss@h:6380/0");
    }

    #[test]
    fn tls_is_refused() {
        let tls = redis(&[("host", "h"), ("port", "1"), ("tls_enabled", "true")]);
        assert!(RedisSettings::from_config(&tls, |_| None).is_err());
    }
}
