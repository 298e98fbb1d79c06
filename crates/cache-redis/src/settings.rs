//! The redis cache's settings: Triton's `redis_cache` keys and defaults, read from the
//! `--cache-config redis,<key>=<value>` pairs.

use std::time::Duration;

use nereid_core::cache::CacheConfig;
use nereid_core::{Error, Result};

use crate::tls::TlsSettings;

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
    /// `tls_enabled` with its files; `None` for a plain connection.
    pub tls: Option<TlsSettings>,
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
        let path = |key: &str| values.get(key).map(std::path::PathBuf::from);
        let tls = if tls {
            let settings = TlsSettings {
                cert: path("cert"),
                key: path("key"),
                cacert: path("cacert"),
                cacert_dir: path("cacert_dir"),
                sni: values.get("sni").cloned(),
            };
            settings.check(host)?;
            Some(settings)
        } else {
            // Triton reads the TLS files only with tls_enabled; so does Nereid, but says so.
            let ignored: Vec<&str> = TLS_KEYS
                .iter()
                .copied()
                .filter(|k| values.contains_key(*k))
                .collect();
            if !ignored.is_empty() {
                tracing::warn!(
                    "redis cache: {} ignored without tls_enabled=true",
                    ignored.join(", ")
                );
            }
            None
        };
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
            tls,
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
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{auth}{host}:{}/{}", self.port, self.db)
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
    fn tls_settings_are_read_and_checked() {
        let tls = redis(&[
            ("host", "h"),
            ("port", "1"),
            ("tls_enabled", "true"),
            ("cacert", "/ca.pem"),
        ]);
        let settings = RedisSettings::from_config(&tls, |_| None).expect("tls");
        assert_eq!(settings.url(), "rediss://h:1/0");
        assert_eq!(
            settings.tls.and_then(|t| t.cacert),
            Some(std::path::PathBuf::from("/ca.pem"))
        );
        let half = redis(&[
            ("host", "h"),
            ("port", "1"),
            ("tls_enabled", "true"),
            ("cert", "/c.pem"),
        ]);
        let e = RedisSettings::from_config(&half, |_| None).expect_err("no key");
        assert!(e.message().contains("'cert' is set without 'key'"), "{e}");
        let sni = redis(&[
            ("host", "h"),
            ("port", "1"),
            ("tls_enabled", "true"),
            ("sni", "other"),
        ]);
        let e = RedisSettings::from_config(&sni, |_| None).expect_err("sni");
        assert!(
            e.message()
                .contains("'sni' (other) differs from 'host' (h)"),
            "{e}"
        );
        // Without tls_enabled the TLS keys are ignored, as in Triton.
        let off = redis(&[("host", "h"), ("port", "1"), ("cacert", "/ca.pem")]);
        let settings = RedisSettings::from_config(&off, |_| None).expect("plain");
        assert_eq!(settings.url(), "redis://h:1/0");
        assert_eq!(settings.tls, None);
    }
}
