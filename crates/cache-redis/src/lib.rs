//! The Redis cache (`--cache-config redis,host=H,port=P,...`): entries live in a Redis
//! server, so several Nereid processes share them and they survive restarts.
//!
//! Each entry is one Redis hash named `nereid:<128-bit key hash>` with two fields: `k`, the
//! full encoded key (compared on every lookup, so a hash collision is a miss, never a wrong
//! answer), and `v`, the encoded outputs. Like Triton, no expiry is set; Redis' own
//! eviction policy applies.
//!
//! Redis being down never fails or slows inference: while there is no connection, lookups
//! miss and inserts are skipped at once, a background task reconnects (about once a
//! second), and errors are logged at most once every ten seconds.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use nereid_core::cache::key::CacheKey;
use nereid_core::cache::{codec, CacheConfig, CacheStore, CachedOutputs};
use nereid_core::{Error, Result};
use parking_lot::{Mutex, RwLock};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub mod settings;
pub mod tls;

pub use settings::RedisSettings;

/// How long a background connection attempt may take when `connect_timeout` is 0.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The Redis cache.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    settings: RedisSettings,
    client: redis::Client,
    /// Empty while disconnected.
    connections: RwLock<Vec<ConnectionManager>>,
    connecting: AtomicBool,
    next: AtomicUsize,
    errors: ErrorLog,
}

/// Logs the first error, then at most one line per interval with the count in between.
#[derive(Default)]
struct ErrorLog {
    state: Mutex<(Option<Instant>, u64)>,
}

impl ErrorLog {
    fn report(&self, what: &str, error: &dyn std::fmt::Display) {
        let mut state = self.state.lock();
        let due = state.0.is_none_or(|last| last.elapsed() >= LOG_INTERVAL);
        if due {
            tracing::error!(
                suppressed = state.1,
                "redis cache: {what}: {error}; serving requests without the cache until it is back"
            );
            *state = (Some(Instant::now()), 0);
        } else {
            state.1 += 1;
        }
    }
}

impl RedisStore {
    /// [`Self::from_config`] as a shared store, the shape the wiring crate's store
    /// choice takes (`nereid_embed::caches::CacheKinds::redis`).
    pub fn open(config: &CacheConfig) -> Result<Arc<dyn CacheStore>> {
        Ok(Arc::new(Self::from_config(config)?))
    }

    /// The cache `--cache-config redis,...` asks for (credentials may also come from the
    /// environment, as in Triton).
    pub fn from_config(config: &CacheConfig) -> Result<Self> {
        Self::new(RedisSettings::from_config(config, |k| {
            std::env::var(k).ok()
        })?)
    }

    /// A cache for the server in `settings`. Connects in the background; an unreachable
    /// server is not an error here (it is logged, and the cache works once it answers).
    pub fn new(settings: RedisSettings) -> Result<Self> {
        let client = match &settings.tls {
            None => redis::Client::open(settings.url().as_str()),
            Some(tls) => {
                redis::Client::build_with_tls(settings.url().as_str(), tls.certificates()?)
            }
        }
        .map_err(|e| Error::invalid_arg(format!("Failed to initialize RedisCache: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                client,
                connections: RwLock::new(Vec::new()),
                connecting: AtomicBool::new(false),
                next: AtomicUsize::new(0),
                errors: ErrorLog::default(),
            }),
        })
    }

    /// Starts connecting now rather than at the first request.
    pub fn connect_in_background(&self) {
        self.connection();
    }

    fn connection(&self) -> Option<ConnectionManager> {
        {
            let connections = self.inner.connections.read();
            if !connections.is_empty() {
                let i = self.inner.next.fetch_add(1, Relaxed) % connections.len();
                return Some(connections[i].clone());
            }
        }
        if !self.inner.connecting.swap(true, Relaxed) {
            let inner = self.inner.clone();
            tokio::spawn(async move { inner.connect().await });
        }
        None
    }

    fn failed(&self, what: &str, error: &dyn std::fmt::Display) {
        self.inner.errors.report(what, error);
        // Drop the connections; the next request starts a fresh background connect.
        self.inner.connections.write().clear();
    }

    fn key_name(key: &CacheKey) -> String {
        format!("nereid:{:032x}", key.hash128())
    }

    /// The outputs stored under `key`; `None` on a miss or when Redis cannot be reached.
    pub async fn lookup(&self, key: &CacheKey<'_>) -> Option<CachedOutputs> {
        let mut connection = self.connection()?;
        let mut command = redis::cmd("HMGET");
        command.arg(Self::key_name(key)).arg("k").arg("v");
        let query = command.query_async::<(Option<Vec<u8>>, Option<Vec<u8>>)>(&mut connection);
        let found = match tokio::time::timeout(self.inner.settings.wait_timeout, query).await {
            Ok(Ok((Some(stored_key), Some(value)))) => {
                // The full key must match: a different request with the same hash misses.
                let same = codec::decode_key(&stored_key).is_some_and(|k| &k == key);
                same.then(|| codec::decode_outputs(&value))
                    .flatten()
                    .map(Arc::new)
            }
            Ok(Ok(_)) => None,
            Ok(Err(e)) => {
                self.failed("lookup failed", &e);
                None
            }
            Err(_) => {
                self.failed("lookup timed out", &"no answer within wait_timeout");
                None
            }
        };
        found
    }

    /// Stores `outputs` under `key`; errors are logged, never returned to the request.
    pub async fn insert(&self, key: &CacheKey<'_>, outputs: &CachedOutputs) -> Result<()> {
        let Some(mut connection) = self.connection() else {
            return Err(Error::unavailable("redis cache is not connected"));
        };
        let mut command = redis::cmd("HSET");
        command
            .arg(Self::key_name(key))
            .arg("k")
            .arg(codec::encode_key(key))
            .arg("v")
            .arg(codec::encode_outputs(outputs));
        let query = command.query_async::<()>(&mut connection);
        match tokio::time::timeout(self.inner.settings.wait_timeout, query).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                self.failed("insert failed", &e);
                Err(Error::unavailable(format!("redis insert failed: {e}")))
            }
            Err(_) => {
                self.failed("insert timed out", &"no answer within wait_timeout");
                Err(Error::unavailable("redis insert timed out"))
            }
        }
    }
}

impl CacheStore for RedisStore {
    fn lookup<'a>(&'a self, key: &'a CacheKey) -> BoxFuture<'a, Option<CachedOutputs>> {
        Box::pin(RedisStore::lookup(self, key))
    }

    fn insert<'a>(
        &'a self,
        key: &'a CacheKey,
        outputs: &'a CachedOutputs,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(RedisStore::insert(self, key, outputs))
    }

    fn start(&self) {
        self.connect_in_background();
    }

    fn describe(&self) -> String {
        format!("redis at {}", self.inner.settings.address())
    }
}

impl Inner {
    async fn connect(self: Arc<Self>) {
        let timeout = self
            .settings
            .connect_timeout
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(self.settings.socket_timeout)
            .set_number_of_retries(1);
        let mut connections = Vec::with_capacity(self.settings.pool_size);
        let mut failure = None;
        for _ in 0..self.settings.pool_size {
            let attempt = self
                .client
                .get_connection_manager_with_config(config.clone());
            match tokio::time::timeout(timeout, attempt).await {
                Ok(Ok(connection)) => connections.push(connection),
                Ok(Err(e)) => {
                    failure = Some(e.to_string());
                    break;
                }
                Err(_) => {
                    failure = Some(format!("no connection within {timeout:?}"));
                    break;
                }
            }
        }
        match failure {
            None => {
                tracing::info!(address = %self.settings.address(), "redis cache connected");
                *self.connections.write() = connections;
            }
            Some(e) => {
                self.errors.report(
                    &format!("cannot connect to {}", self.settings.address()),
                    &e,
                );
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
        self.connecting.store(false, Relaxed);
    }
}
