//! The typed settings each part of the server takes, derived from a [`Config`]: network
//! threads, storage and shared-memory limits, the HTTP and gRPC frontends' options, the
//! response cache.

use std::time::Duration;

use nereid_core::cache::CacheConfig;
use nereid_core::rate_limit::ResourceLimit;
use nereid_core::repository::StorageLimits;
use nereid_core::shm::ShmLimits;
use nereid_net::Limits;

use super::{Config, GrpcCompressionLevel, RateLimitMode};

impl Config {
    /// How many threads serve the network. `--io-threads` when given; else the largest
    /// of tritonserver's per-endpoint thread counts given (`--http-thread-count`,
    /// `--grpc-infer-thread-count`, `--sagemaker-thread-count`,
    /// `--vertex-ai-thread-count`), since Nereid's endpoints share one pool of async
    /// threads, capped at the cores (more threads than cores only add wake-ups); else
    /// half the cores: the protocol work of a request is short, and on a machine whose
    /// other cores are busy (model instances, a load generator) every extra network
    /// thread mostly adds work stealing; on two cores one thread costs a fifth less CPU
    /// per request than two (BENCHMARKS.md, "Server CPU per request").
    pub fn io_threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(n) = self.cli.io_threads {
            return usize::from(n);
        }
        let cli = &self.cli;
        let asked = [
            cli.http_thread_count,
            cli.grpc_infer_thread_count,
            cli.sagemaker_thread_count,
            cli.vertex_ai_thread_count,
        ]
        .into_iter()
        .flatten()
        .max();
        match asked {
            Some(n) => usize::try_from(n).unwrap_or(1).clamp(1, cores),
            None => nereid_net::default_io_threads(),
        }
    }

    /// The rate limiter `--rate-limit` and `--rate-limit-resource` ask for (`None`: off).
    pub fn rate_limit(&self) -> Option<Vec<ResourceLimit>> {
        if self.cli.rate_limit == RateLimitMode::Off {
            return None;
        }
        let limits = self.cli.rate_limit_resource.iter().map(|r| ResourceLimit {
            name: r.name.clone(),
            // A negative count, which Triton reads as a huge unsigned one, is none here.
            count: u64::try_from(r.count).unwrap_or(0),
            device: r.device,
        });
        Some(limits.collect())
    }

    /// How long the repository waits for its storage.
    pub fn storage_limits(&self) -> StorageLimits {
        StorageLimits {
            scan: Duration::from_secs(self.cli.repository_timeout_secs.max(1)),
            load: Duration::from_secs(self.cli.model_load_timeout_secs.max(1)),
        }
    }

    /// How often the system gauges are polled.
    pub fn metrics_interval(&self) -> Duration {
        Duration::from_millis(self.cli.metrics_interval_ms.unsigned_abs())
    }

    /// Seconds shutdown waits for in-flight requests (a negative value is 0, as Triton).
    pub fn exit_timeout(&self) -> Duration {
        Duration::from_secs(self.cli.exit_timeout_secs.max(0).unsigned_abs().into())
    }

    /// Whether and how much shared memory clients may register.
    pub fn shm_limits(&self) -> ShmLimits {
        ShmLimits {
            allow_clients: self.cli.allow_client_shm,
            max_regions: usize::try_from(self.cli.shm_max_regions).unwrap_or(usize::MAX),
            max_total_bytes: self.cli.shm_max_total_bytes,
        }
    }

    /// `--http-max-input-size` in bytes (checked positive at parse).
    pub fn http_max_input_size(&self) -> usize {
        usize::try_from(self.cli.http_max_input_size).unwrap_or(usize::MAX)
    }

    /// The HTTP and metrics ports' limits, each port capped at `max_connections`.
    pub fn http_limits(&self, max_connections: usize) -> Limits {
        Limits {
            max_connections,
            header_timeout: seconds(self.cli.http_header_timeout_secs),
            body_timeout: seconds(self.cli.http_body_timeout_secs),
            idle_timeout: seconds(self.cli.http_idle_timeout_secs),
            write_timeout: seconds(self.cli.write_timeout_secs),
        }
    }

    /// The gRPC frontend's settings, its port capped at `max_connections`. Reads the TLS
    /// files when TLS is on: one that cannot be used is tritonserver's "failed to start
    /// GRPC service" (naming the flag and the file). Negative HTTP/2 policy values are
    /// ignored for gRPC core's defaults, as gRPC does with Triton's; a connection age (or
    /// grace) of 0 is unset, as Triton passes it to gRPC only when not 0.
    pub fn grpc_options(&self, max_connections: usize) -> anyhow::Result<nereid_grpc::GrpcOptions> {
        use nereid_grpc::CompressionLevel;
        let cli = &self.cli;
        let tls = if cli.grpc_use_ssl || cli.grpc_use_ssl_mutual {
            let files = nereid_grpc::TlsFiles {
                server_cert: cli.grpc_server_cert.clone().into(),
                server_key: cli.grpc_server_key.clone().into(),
                root_cert: cli.grpc_root_cert.clone().into(),
                mutual: cli.grpc_use_ssl_mutual,
            };
            let tls = nereid_grpc::ServerTls::load(&files)
                .map_err(|e| anyhow::anyhow!("failed to start GRPC service: {e}"))?;
            Some(tls)
        } else {
            None
        };
        let defaults = nereid_grpc::Http2Policy::default();
        let count = |value: i32, default: u32| u32::try_from(value).unwrap_or(default);
        let positive_ms = |value: Option<i32>| value.filter(|ms| *ms > 0).map(millis);
        Ok(nereid_grpc::GrpcOptions {
            compression_level: match cli.grpc_infer_response_compression_level {
                GrpcCompressionLevel::None => CompressionLevel::None,
                GrpcCompressionLevel::Low => CompressionLevel::Low,
                GrpcCompressionLevel::Medium => CompressionLevel::Medium,
                GrpcCompressionLevel::High => CompressionLevel::High,
            },
            message_limits: nereid_grpc::MessageLimits {
                max_input: cli.grpc_max_input_size,
                max_decompressed: cli.grpc_max_decompressed_size,
            },
            limits: Limits {
                idle_timeout: seconds(cli.grpc_idle_timeout_secs),
                body_timeout: seconds(cli.grpc_body_timeout_secs),
                ..self.http_limits(max_connections)
            },
            http2: nereid_grpc::Http2Policy {
                keepalive_time: millis(cli.grpc_keepalive_time),
                keepalive_timeout: millis(cli.grpc_keepalive_timeout),
                permit_without_calls: cli.grpc_keepalive_permit_without_calls,
                max_pings_without_data: count(
                    cli.grpc_http2_max_pings_without_data,
                    defaults.max_pings_without_data,
                ),
                min_recv_ping_interval: if cli.grpc_http2_min_recv_ping_interval_without_data < 0 {
                    defaults.min_recv_ping_interval
                } else {
                    millis(cli.grpc_http2_min_recv_ping_interval_without_data)
                },
                max_ping_strikes: count(cli.grpc_http2_max_ping_strikes, defaults.max_ping_strikes),
                max_connection_age: positive_ms(cli.grpc_max_connection_age),
                max_connection_age_grace: positive_ms(cli.grpc_max_connection_age_grace),
            },
            tls,
            restrictions: self.grpc_restrictions.clone(),
            header_forward: self.grpc_header_forward.clone(),
            response_delay: nereid_grpc::response_delay::delay_from(
                std::env::var(nereid_grpc::response_delay::DELAY_VAR)
                    .ok()
                    .as_deref(),
            ),
            infer_delays: nereid_grpc::infer_delays::InferDelays::from_env(),
            // Checked positive at parse.
            response_pool_size: cli
                .grpc_max_response_pool_size
                .map_or(nereid_core::response_stream::RESPONSES_BUFFERED, |size| {
                    usize::try_from(size).unwrap_or(1)
                }),
        })
    }

    /// The response cache's settings from `--cache-config` (or the deprecated
    /// `--response-cache-byte-size`), with tritonserver's messages for malformed flags.
    pub fn cache_config(&self) -> anyhow::Result<Option<CacheConfig>> {
        let byte_size = match self.cli.response_cache_byte_size {
            Some(size) => Some(u64::try_from(size).map_err(|_| {
                anyhow::anyhow!(
                    "Bad option: \"--response-cache-byte-size\".\nProvided option value is out of bound. Got {size}"
                )
            })?),
            None => None,
        };
        CacheConfig::from_flags(&self.cli.cache_config, byte_size)
            .map_err(|e| anyhow::anyhow!("{}", e.message()))
    }
}

/// A `--...-secs` timeout flag: 0 turns the timeout off.
fn seconds(secs: u64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// A millisecond flag checked positive at parse.
fn millis(ms: i32) -> Duration {
    Duration::from_millis(ms.max(0).unsigned_abs().into())
}
