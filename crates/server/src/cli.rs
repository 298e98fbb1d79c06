//! The command line, with tritonserver's flag names, defaults and `--flag value` /
//! `--flag=value` syntax, parsed into a typed [`Config`]. Every problem stops start-up with
//! a message naming the flag.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::{ArgAction, Parser};
use nereid_core::cache::CacheConfig;
use nereid_core::header_forward::HeaderForward;
use nereid_core::log_settings::LogFormat;
use nereid_core::metrics::MetricsConfig;
use nereid_core::repository::StorageLimits;
use nereid_core::restricted::Restrictions;
use nereid_core::shm::ShmLimits;
use nereid_core::ControlMode;
use nereid_net::Limits;

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(format!("expected true or false, got '{s}'")),
    }
}

/// Raw command-line flags (tritonserver-compatible subset).
#[derive(Debug, Parser)]
#[command(
    name = "nereid",
    version,
    about = "A Triton-compatible inference server"
)]
pub struct Cli {
    /// Model repository directory (repeatable).
    #[arg(
        long = "model-repository",
        visible_alias = "model-store",
        required = true
    )]
    pub model_repository: Vec<PathBuf>,
    /// HTTP port (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// gRPC port (0 picks a free one).
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// Metrics port (0 picks a free one).
    #[arg(long, default_value_t = 8002)]
    pub metrics_port: u16,
    /// HTTP bind address.
    #[arg(long, default_value = "0.0.0.0")]
    pub http_address: IpAddr,
    /// gRPC bind address.
    #[arg(long, default_value = "0.0.0.0")]
    pub grpc_address: IpAddr,
    /// Metrics bind address.
    #[arg(long, default_value = "0.0.0.0")]
    pub metrics_address: IpAddr,
    /// Serve HTTP.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub allow_http: bool,
    /// Serve gRPC.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub allow_grpc: bool,
    /// Serve metrics.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub allow_metrics: bool,
    /// Milliseconds between two polls of the CPU utilization and memory gauges.
    #[arg(long, default_value_t = 2000)]
    pub metrics_interval_ms: u64,
    /// `<setting>=<value>` (repeatable): `counter_latencies`, `summary_latencies`,
    /// `histogram_latencies` (true/false) and `summary_quantiles` (`<quantile>:<error>,...`).
    #[arg(long)]
    pub metrics_config: Vec<String>,
    /// none, poll or explicit.
    #[arg(long, default_value = "none")]
    pub model_control_mode: String,
    /// Poll interval in poll mode.
    #[arg(long, default_value_t = 15)]
    pub repository_poll_secs: u64,
    /// Model to load at start-up in explicit mode (repeatable; `*` loads all).
    #[arg(long)]
    pub load_model: Vec<String>,
    /// Never auto-complete model configurations.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub strict_model_config: bool,
    /// Same as --strict-model-config (newer tritonserver spelling).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub disable_auto_complete_config: bool,
    /// Exit at start-up when a model fails to load.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub exit_on_error: bool,
    /// Ready only when every model loaded.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub strict_readiness: bool,
    /// Seconds to wait for in-flight requests at shutdown.
    #[arg(long, default_value_t = 30)]
    pub exit_timeout_secs: u64,
    /// Threads that serve the network (HTTP, gRPC, metrics); model instances run on
    /// threads of their own. Default: half the available cores, at least one.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub io_threads: Option<u16>,
    /// Seconds one model load may take (its files, backend model and instances) before it
    /// fails; the server keeps serving meanwhile.
    #[arg(long, default_value_t = 600)]
    pub model_load_timeout_secs: u64,
    /// Seconds a repository listing or a `config.pbtxt` read may take before the
    /// operation that needs it fails (a stalled mount).
    #[arg(long, default_value_t = 30)]
    pub repository_timeout_secs: u64,
    /// Most shared-memory regions (system and CUDA together) clients may register; each
    /// system region holds a mapping and a file descriptor.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=nereid_core::shm::MAX_MAPPINGS as u64))]
    pub shm_max_regions: u64,
    /// Most bytes all registered shared-memory regions may span together.
    #[arg(long, default_value_t = 64 << 30)]
    pub shm_max_total_bytes: u64,
    /// Let clients register, unregister and use system and CUDA shared-memory regions.
    /// Off by default, as in Triton after 2.51: any client reaching the port could
    /// otherwise make the server map another process's shared memory.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub allow_client_shm: bool,
    /// `<apis>:<header>=<value>` (repeatable): the listed HTTP API groups answer only
    /// requests carrying that header with that value.
    #[arg(long)]
    pub http_restricted_api: Vec<String>,
    /// `<protocols>:<key>=<value>` (repeatable): the listed gRPC API groups answer only
    /// calls carrying the metadata `triton-grpc-protocol-<key>` with that value.
    #[arg(long)]
    pub grpc_restricted_protocol: Vec<String>,
    /// Regular expression: HTTP request headers whose names it matches (anywhere,
    /// case-insensitively unless it starts `(?-i)`) reach the model as string request
    /// parameters on the infer endpoint.
    #[arg(long, allow_hyphen_values = true)]
    pub http_header_forward_pattern: Option<String>,
    /// The same for the gRPC metadata of `ModelInfer` and `ModelStreamInfer` calls.
    #[arg(long, allow_hyphen_values = true)]
    pub grpc_header_forward_pattern: Option<String>,
    /// `<backend>,<key>=<value>` (repeatable).
    #[arg(long)]
    pub backend_config: Vec<String>,
    /// `<cache>,<key>=<value>` (repeatable): the response cache (`local`, `redis` or a
    /// TRITONCACHE library's name).
    #[arg(long)]
    pub cache_config: Vec<String>,
    /// `[<mode>,]<setting>=<value>` (repeatable): the trace extension's start-up settings
    /// (`level`, `rate`, `count`, `mode`, `triton,file`, `triton,log-frequency`).
    #[arg(long)]
    pub trace_config: Vec<String>,
    /// Deprecated: `--trace-config triton,file=<path>`.
    #[arg(long)]
    pub trace_file: Option<String>,
    /// Deprecated: `--trace-config level=<OFF|TIMESTAMPS|TENSORS>` (repeatable).
    #[arg(long)]
    pub trace_level: Vec<String>,
    /// Deprecated: `--trace-config rate=<n>`.
    #[arg(long, allow_hyphen_values = true)]
    pub trace_rate: Option<String>,
    /// Deprecated: `--trace-config count=<n>`.
    #[arg(long, allow_hyphen_values = true)]
    pub trace_count: Option<String>,
    /// Deprecated: `--trace-config triton,log-frequency=<n>`.
    #[arg(long, allow_hyphen_values = true)]
    pub trace_log_frequency: Option<String>,
    /// Deprecated: the same as `--cache-config local,size=N`.
    #[arg(long)]
    pub response_cache_byte_size: Option<u64>,
    /// Where TRITONCACHE libraries are: `<dir>/<name>/libtritoncache_<name>.so` (default
    /// /opt/tritonserver/caches). Given explicitly, a library here named `local` or
    /// `redis` replaces the built-in cache of that name.
    #[arg(long)]
    pub cache_directory: Option<String>,
    /// Where Triton backend libraries are: a model whose backend is not built in is
    /// served by `<dir>/<backend>/libtriton_<backend>.so` (default
    /// /opt/tritonserver/backends).
    #[arg(long, default_value = tritonserver::backend::DEFAULT_BACKEND_DIRECTORY)]
    pub backend_directory: std::path::PathBuf,
    /// `<GPU device id>:<byte size>` (repeatable): the CUDA virtual address size for
    /// growable implicit state. Checked like tritonserver and accepted without effect,
    /// since implicit state lives in host memory here.
    #[arg(long)]
    pub cuda_virtual_address_size: Vec<String>,
    /// Server identifier reported in server metadata. `triton`, as tritonserver's `--id`
    /// default, because Triton's own client examples check the name.
    #[arg(long, default_value = "triton")]
    pub id: String,
    /// Verbose log level (0 = off).
    #[arg(long, default_value_t = 0)]
    pub log_verbose: u32,
    /// Log info messages.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub log_info: bool,
    /// Log warnings.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub log_warning: bool,
    /// Log errors.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub log_error: bool,
    /// default or ISO8601.
    #[arg(long, default_value = "default")]
    pub log_format: String,
    /// Write the log to this file (appending) instead of stderr; fixed for the process's
    /// life, as in Triton.
    #[arg(long)]
    pub log_file: Option<String>,
    /// Largest HTTP request JSON, raw input or decompressed body in bytes (Triton's
    /// default, 64 MiB); binary tensor data after the JSON may take as much again.
    #[arg(long, default_value_t = nereid_http::DEFAULT_MAX_INPUT_SIZE)]
    pub http_max_input_size: usize,
    /// Largest gRPC request message in bytes, compressed or decompressed (Triton has no
    /// such flag and accepts 2 GiB; the default is --http-max-input-size's).
    #[arg(long, default_value_t = nereid_grpc::DEFAULT_MAX_INPUT_SIZE)]
    pub grpc_max_input_size: usize,
    /// Most connections open at once on each port (HTTP, gRPC, metrics); the next one is
    /// closed at once and logged. Lowered at start-up to fit the open file limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Seconds a request's head (request line and headers) may take to arrive, from its
    /// first byte, on the HTTP and metrics ports; 0 = no limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_HEADER_TIMEOUT_SECS)]
    pub http_header_timeout_secs: u64,
    /// Seconds a request body may pause between two pieces on the HTTP and metrics
    /// ports; the request then fails with 408 and the connection closes. 0 = no limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_BODY_TIMEOUT_SECS)]
    pub http_body_timeout_secs: u64,
    /// Seconds an HTTP or metrics connection may stay open with no request in flight;
    /// 0 = no limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_IDLE_TIMEOUT_SECS)]
    pub http_idle_timeout_secs: u64,
    /// Seconds a gRPC connection may stay open with no call in flight; 0 = no limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_IDLE_TIMEOUT_SECS)]
    pub grpc_idle_timeout_secs: u64,
    /// Milliseconds between the server's HTTP/2 keep-alive pings on a gRPC connection,
    /// which close connections to dead peers.
    #[arg(long, default_value_t = 7_200_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub grpc_keepalive_time: u64,
    /// Milliseconds a keep-alive ping may go unanswered before the connection is closed.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub grpc_keepalive_timeout: u64,
}

/// A `--backend-config` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSetting {
    /// Backend name.
    pub backend: String,
    /// Setting name.
    pub key: String,
    /// Value.
    pub value: String,
}

/// The validated configuration the server is wired from.
#[derive(Debug)]
pub struct Config {
    /// The raw flags.
    pub cli: Cli,
    /// Parsed control mode.
    pub control_mode: ControlMode,
    /// Parsed log format.
    pub log_format: LogFormat,
    /// Parsed backend settings.
    pub backend_settings: Vec<BackendSetting>,
    /// The HTTP API groups `--http-restricted-api` restricts.
    pub http_restrictions: Arc<Restrictions>,
    /// The gRPC API groups `--grpc-restricted-protocol` restricts.
    pub grpc_restrictions: Arc<Restrictions>,
    /// Compiled `--http-header-forward-pattern`, when given.
    pub http_header_forward: Option<Arc<HeaderForward>>,
    /// Compiled `--grpc-header-forward-pattern`, when given.
    pub grpc_header_forward: Option<Arc<HeaderForward>>,
    /// Parsed `--metrics-config` settings.
    pub metrics_config: MetricsConfig,
    /// The trace extension's start-up settings (`--trace-config` and the deprecated
    /// `--trace-*` flags).
    pub trace: nereid_core::trace::TraceOptions,
    /// The OTLP exporter's settings, in the `opentelemetry` trace mode.
    pub otlp: Option<nereid_otel::OtlpOptions>,
}

impl Config {
    /// How many threads serve the network. Half the cores by default: the protocol work
    /// of a request is short, and on a machine whose other cores are busy (model
    /// instances, a load generator) every extra network thread mostly adds wake-ups and
    /// work stealing; on two cores one thread costs a fifth less CPU per request than
    /// two (BENCHMARKS.md, "Server CPU per request").
    pub fn io_threads(&self) -> usize {
        match self.cli.io_threads {
            Some(n) => usize::from(n),
            None => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
        }
    }

    /// Validates the flags.
    pub fn from_cli(cli: Cli) -> anyhow::Result<Self> {
        let control_mode = match cli.model_control_mode.as_str() {
            "none" => ControlMode::None,
            "poll" => ControlMode::Poll,
            "explicit" => ControlMode::Explicit,
            other => bail!(
                "invalid value '{other}' for --model-control-mode: expected none, poll or explicit"
            ),
        };
        if !cli.load_model.is_empty() && control_mode != ControlMode::Explicit {
            bail!("--load-model requires --model-control-mode=explicit");
        }
        let Some(log_format) = LogFormat::parse(&cli.log_format) else {
            bail!(
                "invalid value '{}' for --log-format: expected default or ISO8601",
                cli.log_format
            );
        };
        let backend_settings = cli
            .backend_config
            .iter()
            .map(|s| parse_backend_setting(s))
            .collect::<anyhow::Result<_>>()?;
        for flag in &cli.cuda_virtual_address_size {
            parse_gpu_size_pair(flag)?;
        }
        if cli.http_max_input_size == 0 {
            bail!("--http-max-input-size must be greater than 0.");
        }
        if cli.grpc_max_input_size == 0 {
            bail!("--grpc-max-input-size must be greater than 0.");
        }
        if cli.max_connections == 0 {
            bail!("--max-connections must be greater than 0.");
        }
        if cli.metrics_interval_ms == 0 {
            bail!("--metrics-interval-ms must be greater than 0.");
        }
        let metrics_config =
            MetricsConfig::from_flags(&cli.metrics_config).map_err(anyhow::Error::msg)?;
        let http_restrictions =
            Restrictions::parse(&cli.http_restricted_api, "http-restricted-api", "", "api")
                .map_err(anyhow::Error::msg)?;
        let grpc_restrictions = Restrictions::parse(
            &cli.grpc_restricted_protocol,
            "grpc-restricted-protocol",
            nereid_grpc::RESTRICTED_HEADER_PREFIX,
            "protocol",
        )
        .map_err(anyhow::Error::msg)?;
        let http_header_forward = header_forward(
            &cli.http_header_forward_pattern,
            "http-header-forward-pattern",
        )?;
        let grpc_header_forward = header_forward(
            &cli.grpc_header_forward_pattern,
            "grpc-header-forward-pattern",
        )?;
        for root in &cli.model_repository {
            if !root.is_dir() {
                bail!(
                    "--model-repository {}: not a readable directory",
                    root.display()
                );
            }
        }
        let trace = crate::trace_flags::parse(
            &cli.trace_config,
            &crate::trace_flags::Deprecated {
                file: cli.trace_file.as_deref(),
                level: &cli.trace_level,
                rate: cli.trace_rate.as_deref(),
                count: cli.trace_count.as_deref(),
                log_frequency: cli.trace_log_frequency.as_deref(),
            },
        )?;
        let otlp = crate::trace_flags::otlp_options(&trace)?;
        Ok(Self {
            trace,
            otlp,
            cli,
            control_mode,
            log_format,
            backend_settings,
            http_restrictions: Arc::new(http_restrictions),
            grpc_restrictions: Arc::new(grpc_restrictions),
            http_header_forward,
            grpc_header_forward,
            metrics_config,
        })
    }
}

impl Config {
    /// How long the repository waits for its storage.
    pub fn storage_limits(&self) -> StorageLimits {
        StorageLimits {
            scan: Duration::from_secs(self.cli.repository_timeout_secs.max(1)),
            load: Duration::from_secs(self.cli.model_load_timeout_secs.max(1)),
        }
    }

    /// How often the system gauges are polled.
    pub fn metrics_interval(&self) -> Duration {
        Duration::from_millis(self.cli.metrics_interval_ms)
    }

    /// Whether and how much shared memory clients may register.
    pub fn shm_limits(&self) -> ShmLimits {
        ShmLimits {
            allow_clients: self.cli.allow_client_shm,
            max_regions: usize::try_from(self.cli.shm_max_regions).unwrap_or(usize::MAX),
            max_total_bytes: self.cli.shm_max_total_bytes,
        }
    }

    /// The HTTP and metrics ports' limits, each port capped at `max_connections`.
    pub fn http_limits(&self, max_connections: usize) -> Limits {
        Limits {
            max_connections,
            header_timeout: seconds(self.cli.http_header_timeout_secs),
            body_timeout: seconds(self.cli.http_body_timeout_secs),
            idle_timeout: seconds(self.cli.http_idle_timeout_secs),
        }
    }

    /// The gRPC frontend's settings, its port capped at `max_connections`.
    pub fn grpc_options(&self, max_connections: usize) -> nereid_grpc::GrpcOptions {
        nereid_grpc::GrpcOptions {
            max_input_bytes: self.cli.grpc_max_input_size,
            limits: Limits {
                idle_timeout: seconds(self.cli.grpc_idle_timeout_secs),
                ..self.http_limits(max_connections)
            },
            keepalive_time: Duration::from_millis(self.cli.grpc_keepalive_time),
            keepalive_timeout: Duration::from_millis(self.cli.grpc_keepalive_timeout),
            restrictions: self.grpc_restrictions.clone(),
            header_forward: self.grpc_header_forward.clone(),
            ..nereid_grpc::GrpcOptions::default()
        }
    }
}

/// Compiles a `--...-header-forward-pattern` flag; a pattern that does not compile stops
/// start-up naming the flag (Triton would start and never match).
fn header_forward(
    pattern: &Option<String>,
    flag: &str,
) -> anyhow::Result<Option<Arc<HeaderForward>>> {
    let Some(pattern) = pattern else {
        return Ok(None);
    };
    let forward =
        HeaderForward::new(pattern).map_err(|e| anyhow::anyhow!("--{flag}: {}", e.message()))?;
    Ok(Some(Arc::new(forward)))
}

/// A `--...-secs` timeout flag: 0 turns the timeout off.
fn seconds(secs: u64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs))
}

impl Config {
    /// The response cache's settings from `--cache-config` (or the deprecated
    /// `--response-cache-byte-size`), with tritonserver's messages for malformed flags.
    /// Called once logging is up, since it warns.
    pub fn cache_config(&self) -> anyhow::Result<Option<CacheConfig>> {
        if !self.cli.cuda_virtual_address_size.is_empty() {
            tracing::info!(
                "--cuda-virtual-address-size has no effect: implicit state is kept in host memory"
            );
        }
        CacheConfig::from_flags(&self.cli.cache_config, self.cli.response_cache_byte_size)
            .map_err(|e| anyhow::anyhow!("{}", e.message()))
    }
}

/// tritonserver's `<int>:<unsigned>` pair option (`--cuda-virtual-address-size`), with its
/// messages for a missing separator and a value that is not a number.
fn parse_gpu_size_pair(arg: &str) -> anyhow::Result<(i32, u64)> {
    let Some((device, size)) = arg.split_once(':') else {
        bail!(
            "Cannot parse pair option due to incorrect number of inputs.--<pair option> argument requires format <first>:<second>. Found: {arg}"
        );
    };
    let device = device
        .trim()
        .parse::<i32>()
        .map_err(|_| anyhow::anyhow!("Invalid option value. Got {device}"))?;
    let size = size
        .trim()
        .parse::<u64>()
        .map_err(|_| anyhow::anyhow!("Invalid option value. Got {size}"))?;
    Ok((device, size))
}

fn parse_backend_setting(s: &str) -> anyhow::Result<BackendSetting> {
    let format_error = || {
        anyhow::anyhow!(
            "--backend-config option format is '<backend name>,<setting>=<value>'. Got {s}"
        )
    };
    // As tritonserver: the backend is what precedes the first comma; no comma makes a
    // setting every backend gets (an empty backend name here).
    let (backend, rest) = match s.split_once(',') {
        Some(("", _)) => bail!(
            "No backend specified. --backend-config option format is <backend name>,<setting>=<value> or <setting>=<value>. Got {s}"
        ),
        Some((backend, rest)) => (backend, rest),
        None => ("", s),
    };
    let (key, value) = rest.split_once('=').ok_or_else(format_error)?;
    if key.is_empty() || value.is_empty() {
        return Err(format_error());
    }
    Ok(BackendSetting {
        backend: backend.to_string(),
        key: key.to_string(),
        value: value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::restricted::ApiGroup;

    fn parse(args: &[&str]) -> anyhow::Result<Config> {
        let mut all = vec!["nereid", "--model-repository", "."];
        all.extend_from_slice(args);
        Config::from_cli(Cli::try_parse_from(all)?)
    }

    #[test]
    fn io_threads_default_to_half_the_cores_and_refuse_zero() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(parse(&[]).expect("valid").io_threads(), (cores / 2).max(1));
        assert_eq!(
            parse(&["--io-threads", "3"]).expect("valid").io_threads(),
            3
        );
        assert!(parse(&["--io-threads", "0"]).is_err());
    }

    #[test]
    fn backend_config_is_per_backend_or_global_with_tritons_messages() {
        let c = parse(&[
            "--backend-config=python,shm-default-byte-size=2097152",
            "--backend-config=default-max-batch-size=8",
        ])
        .expect("valid");
        let settings: Vec<_> = c
            .backend_settings
            .iter()
            .map(|s| (s.backend.as_str(), s.key.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(
            settings,
            [
                ("python", "shm-default-byte-size", "2097152"),
                ("", "default-max-batch-size", "8")
            ]
        );
        let Err(error) = parse(&["--backend-config=,k=v"]) else {
            panic!("a leading comma names no backend");
        };
        assert!(
            error.to_string().starts_with("No backend specified."),
            "{error}"
        );
        for bad in ["python,k", "python,=v", "python,k="] {
            let Err(error) = parse(&[&format!("--backend-config={bad}")]) else {
                panic!("{bad} is malformed");
            };
            assert_eq!(
                error.to_string(),
                format!("--backend-config option format is '<backend name>,<setting>=<value>'. Got {bad}")
            );
        }
    }

    #[test]
    fn triton_defaults_and_both_syntaxes() {
        let c = parse(&[]).expect("valid");
        assert_eq!(
            (c.cli.http_port, c.cli.grpc_port, c.cli.metrics_port),
            (8000, 8001, 8002)
        );
        assert_eq!(c.control_mode, ControlMode::None);
        let c = parse(&[
            "--http-port=9000",
            "--grpc-port",
            "9001",
            "--allow-metrics=false",
        ])
        .expect("valid");
        assert_eq!((c.cli.http_port, c.cli.grpc_port), (9000, 9001));
        assert!(!c.cli.allow_metrics);
    }

    #[test]
    fn metrics_flags() {
        let c = parse(&[]).expect("valid");
        assert_eq!(c.metrics_interval(), Duration::from_secs(2));
        assert_eq!(c.metrics_config, MetricsConfig::default());
        let c = parse(&[
            "--metrics-interval-ms=250",
            "--metrics-config",
            "summary_latencies=true",
            "--metrics-config=summary_quantiles=0.5:0.05,0.9:0.01",
        ])
        .expect("valid");
        assert_eq!(c.metrics_interval(), Duration::from_millis(250));
        assert!(c.metrics_config.summary_latencies);
        assert_eq!(c.metrics_config.summary_quantiles.len(), 2);
        let e = parse(&["--metrics-config", "summary_quantiles=abc"]).expect_err("bad");
        assert_eq!(
            e.to_string(),
            "--metrics-config summary_quantiles=abc: 'abc' is not <quantile>:<error>"
        );
        let e = parse(&["--metrics-interval-ms=0"]).expect_err("zero");
        assert!(e.to_string().contains("--metrics-interval-ms"), "{e}");
        assert!(parse(&["--metrics-interval-ms=soon"]).is_err());
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(parse(&["--http-port", "abc"]).is_err());
        assert!(parse(&["--no-such-flag"]).is_err());
        assert!(parse(&["--model-control-mode", "sometimes"]).is_err());
        assert!(parse(&["--backend-config", "onnxruntime"]).is_err());
        assert!(parse(&["--load-model", "m"]).is_err());
        assert!(parse(&["--max-connections", "0"]).is_err());
        assert!(parse(&["--grpc-max-input-size", "0"]).is_err());
        assert!(parse(&["--grpc-keepalive-time", "0"]).is_err());
        let e = parse(&["--cuda-virtual-address-size", "0"]).expect_err("no colon");
        assert!(e.to_string().starts_with("Cannot parse pair option"), "{e}");
        let e = parse(&["--cuda-virtual-address-size=0:big"]).expect_err("not a size");
        assert_eq!(e.to_string(), "Invalid option value. Got big");
    }

    #[test]
    fn flags_of_tritons_scripts_are_accepted() {
        let c = parse(&[
            "--backend-directory=/opt/tritonserver/backends",
            "--cuda-virtual-address-size",
            "0:1073741824",
            "--backend-config=python,shm-default-byte-size=1",
        ])
        .expect("valid");
        assert_eq!(c.cli.http_max_input_size, 64 << 20);
        assert_eq!(c.cli.grpc_max_input_size, c.cli.http_max_input_size);
    }

    #[test]
    fn connection_limits_default_like_a_reverse_proxy_and_zero_turns_a_timeout_off() {
        let c = parse(&[]).expect("valid");
        let http = c.http_limits(7);
        assert_eq!(http.max_connections, 7);
        assert_eq!(http.header_timeout, Some(Duration::from_secs(60)));
        assert_eq!(http.body_timeout, Some(Duration::from_secs(60)));
        assert_eq!(http.idle_timeout, Some(Duration::from_secs(300)));
        let grpc = c.grpc_options(7);
        assert_eq!(grpc.max_input_bytes, c.cli.http_max_input_size);
        assert_eq!(grpc.keepalive_time, Duration::from_secs(7200));
        let c = parse(&[
            "--http-idle-timeout-secs=0",
            "--grpc-idle-timeout-secs",
            "2",
        ])
        .expect("valid");
        assert_eq!(c.http_limits(1).idle_timeout, None);
        assert_eq!(
            c.grpc_options(1).limits.idle_timeout,
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn client_shm_is_off_unless_asked_for_in_either_syntax() {
        assert!(!parse(&[]).expect("valid").shm_limits().allow_clients);
        for on in [&["--allow-client-shm"][..], &["--allow-client-shm=true"]] {
            assert!(parse(on).expect("valid").shm_limits().allow_clients);
        }
        assert!(
            !parse(&["--allow-client-shm", "false"])
                .expect("valid")
                .shm_limits()
                .allow_clients
        );
    }

    #[test]
    fn restricted_groups_are_parsed_per_frontend_with_tritons_messages() {
        let c = parse(&[
            "--http-restricted-api=shared-memory,model-repository:admin=s3",
            "--grpc-restricted-protocol",
            "health:k=v",
        ])
        .expect("valid");
        let http = c
            .http_restrictions
            .get(ApiGroup::SharedMemory)
            .expect("set");
        assert_eq!((http.header.as_str(), http.value.as_str()), ("admin", "s3"));
        assert!(c.http_restrictions.get(ApiGroup::Health).is_none());
        let grpc = c.grpc_restrictions.get(ApiGroup::Health).expect("set");
        assert_eq!(grpc.header, "triton-grpc-protocol-k");
        assert!(c.grpc_restrictions.get(ApiGroup::SharedMemory).is_none());
        let error = |args: &[&str]| parse(args).expect_err("refused").to_string();
        assert_eq!(
            error(&["--grpc-restricted-protocol=health"]),
            "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. Got health"
        );
        assert_eq!(
            error(&["--http-restricted-api=helth:k=v"]),
            "unknown restricted api 'helth' "
        );
        assert_eq!(
            error(&[
                "--grpc-restricted-protocol=trace:k=v",
                "--grpc-restricted-protocol=logging,trace:k=w"
            ]),
            "restricted protocol 'trace' can not be specified in multiple config groups"
        );
    }

    #[test]
    fn header_forward_patterns_compile_or_stop_start_up() {
        let c = parse(&[]).expect("valid");
        assert!(c.http_header_forward.is_none() && c.grpc_header_forward.is_none());
        let c = parse(&[
            "--http-header-forward-pattern=.*",
            "--grpc-header-forward-pattern",
            "(?-i)MY_HEADER.*",
        ])
        .expect("valid");
        let http = c.http_header_forward.as_ref().expect("http pattern");
        assert!(http.matches("anything"));
        let grpc = c.grpc_options(1).header_forward.expect("grpc pattern");
        assert!(grpc.matches("MY_HEADER_1") && !grpc.matches("my_header_1"));
        let err = parse(&["--grpc-header-forward-pattern=(unclosed"])
            .expect_err("invalid")
            .to_string();
        assert!(
            err.starts_with(
                "--grpc-header-forward-pattern: invalid header forward pattern '(unclosed'"
            ),
            "{err}"
        );
    }

    #[test]
    fn backend_settings_are_parsed() {
        let c = parse(&["--backend-config=onnxruntime,default-max-batch-size=8"]).expect("valid");
        assert_eq!(
            c.backend_settings,
            [BackendSetting {
                backend: "onnxruntime".into(),
                key: "default-max-batch-size".into(),
                value: "8".into(),
            }]
        );
    }
}
