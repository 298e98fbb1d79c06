//! [`Config`]: the flags checked together, in tritonserver's order, with its messages,
//! and the values that depend on the environment (`AIP_MODE`, `AIP_HTTP_PORT`,
//! `AIP_STORAGE_URI`) or on other flags resolved once.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::bail;
use nereid_cloud::CloudMirror;
use nereid_core::header_forward::HeaderForward;
use nereid_core::log_settings::LogFormat;
use nereid_core::metrics::MetricsConfig;
use nereid_core::restricted::Restrictions;
use nereid_core::ControlMode;

use super::values::{self, Unchecked};
use super::Cli;

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

/// `--grpc-infer-response-compression-level`: gRPC's compression levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcCompressionLevel {
    /// No compression (the default).
    None,
    /// gRPC's low level.
    Low,
    /// gRPC's medium level.
    Medium,
    /// gRPC's high level.
    High,
}

/// Parses `--grpc-infer-response-compression-level` as Triton does (any case).
pub fn compression_level(arg: &str) -> Result<GrpcCompressionLevel, String> {
    use GrpcCompressionLevel::*;
    values::keyword(
        arg,
        // Triton's message spells the flag with underscores.
        "grpc_infer_response_compression_level",
        &[
            ("none", None),
            ("low", Low),
            ("medium", Medium),
            ("high", High),
        ],
    )
}

/// `--rate-limit`: whether the rate limiter gates instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimitMode {
    /// Instances run as soon as they are free (Triton's default).
    Off,
    /// Instances run when their `rate_limiter` resources are free, by priority.
    ExecutionCount,
}

/// Parses `--rate-limit` as Triton does (any case).
pub fn rate_limit_mode(arg: &str) -> Result<RateLimitMode, String> {
    values::keyword(
        arg,
        "rate-limit",
        &[
            ("off", RateLimitMode::Off),
            ("execution_count", RateLimitMode::ExecutionCount),
        ],
    )
}

/// A `--rate-limit-resource=<name>:<count>[:<device>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitResource {
    /// The resource's name, as model configs' `rate_limiter.resources` name it.
    pub name: String,
    /// How many there are.
    pub count: i32,
    /// The device they belong to; `None` is every device.
    pub device: Option<i32>,
}

/// Parses a `--rate-limit-resource`, with Triton's message for a wrong shape.
pub fn rate_limit_resource(arg: &str) -> Result<RateLimitResource, String> {
    let parts: Vec<&str> = arg.split(':').collect();
    let (name, count, device) = match parts.as_slice() {
        [name, count] => (name, count, None),
        [name, count, device] => (name, count, Some(values::integer::<i32>(device)?)),
        _ => {
            return Err(format!(
                "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or '<resource_name>:<count>'. Got {arg}"
            ))
        }
    };
    Ok(RateLimitResource {
        name: name.to_string(),
        count: values::integer(count)?,
        device,
    })
}

/// The validated configuration the server is wired from.
#[derive(Debug)]
pub struct Config {
    /// The raw flags.
    pub cli: Cli,
    /// The model repositories: `--model-repository` in order, repeats dropped, or
    /// `AIP_STORAGE_URI` when none was given; a cloud repository by its local copy.
    pub model_repositories: Vec<PathBuf>,
    /// The cloud repositories (`s3://`, `gs://`, `as://`), copied into local directories.
    pub remote_repositories: Vec<Arc<CloudMirror>>,
    /// With `--exit-on-error=false`, why the repositories cannot be served (one is not a
    /// readable directory): the server starts without them, neither live nor ready.
    pub initialization_error: Option<String>,
    /// Parsed control mode.
    pub control_mode: ControlMode,
    /// `--disable-auto-complete-config`, or the deprecated `--strict-model-config`.
    pub strict_model_config: bool,
    /// Parsed log format.
    pub log_format: LogFormat,
    /// Parsed backend settings.
    pub backend_settings: Vec<BackendSetting>,
    /// Where HTTP is served, if it is (`--allow-http`, off by default under
    /// `AIP_MODE=PREDICTION`; `--http-address`, `--http-port`).
    pub http: Option<SocketAddr>,
    /// Where gRPC is served, if it is (`--allow-grpc`, off by default under
    /// `AIP_MODE=PREDICTION`; `--grpc-address`, `--grpc-port`).
    pub grpc: Option<SocketAddr>,
    /// Whether the Vertex AI endpoint is served (`--allow-vertex-ai`, default on iff
    /// `AIP_MODE=PREDICTION`).
    pub allow_vertex_ai: bool,
    /// The Vertex AI port (`--vertex-ai-port`, else `AIP_HTTP_PORT`, else 8080).
    pub vertex_ai_port: u16,
    /// The metrics bind address (`--metrics-address`, else `--http-address`).
    pub metrics_address: IpAddr,
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
    /// Validates the flags against the process environment.
    pub fn from_cli(cli: Cli) -> anyhow::Result<Self> {
        Self::from_cli_with_env(cli, &|name| std::env::var(name).ok())
    }

    /// [`Self::from_cli`] reading environment variables through `env` (tests inject it).
    pub fn from_cli_with_env(
        cli: Cli,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let control_mode = values::keyword(
            &cli.model_control_mode,
            "model-control-mode",
            &[
                ("none", ControlMode::None),
                ("poll", ControlMode::Poll),
                ("explicit", ControlMode::Explicit),
            ],
        )
        .map_err(|e| bad_option("model-control-mode", &e))?;
        if !cli.load_model.is_empty() && control_mode != ControlMode::Explicit {
            bail!("Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as well.");
        }
        let Some(log_format) = LogFormat::parse(&cli.log_format) else {
            return Err(bad_option(
                "log-format",
                "invalid argument for --log-format",
            ));
        };
        if cli.model_config_name.as_deref() == Some("") {
            return Err(bad_option(
                "model-config-name",
                "Error: empty argument for --model-config-name",
            ));
        }
        check_ranges(&cli)?;
        let backend_settings = cli
            .backend_config
            .iter()
            .map(|s| parse_backend_setting(s))
            .collect::<anyhow::Result<_>>()?;
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
        let (model_repositories, remote_repositories, initialization_error) =
            match model_repositories(&cli, env) {
                Ok((roots, remotes)) => (roots, remotes, None),
                // tritonserver starts without a repository manager then, serving nothing.
                Err(e) if !cli.exit_on_error && e.is::<Unreadable>() => {
                    (Vec::new(), Vec::new(), Some(e.to_string()))
                }
                Err(e) => return Err(e),
            };
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
        // Vertex AI's environment turns its endpoint on and HTTP/gRPC off by default.
        let prediction = env("AIP_MODE").as_deref() == Some("PREDICTION");
        let vertex_ai_port = match (cli.vertex_ai_port, env("AIP_HTTP_PORT")) {
            (Some(port), _) => port,
            (None, Some(port)) => {
                values::integer(&port).map_err(|e| anyhow::anyhow!("AIP_HTTP_PORT: {e}"))?
            }
            (None, None) => 8080,
        };
        let served =
            |allowed: Option<bool>, address: &Unchecked<IpAddr>, port: &Unchecked<u16>, name| {
                if !allowed.unwrap_or(!prediction) {
                    return Ok(None);
                }
                let address = address.checked(&format!("{name}-address"))?;
                let port = port.checked(&format!("{name}-port"))?;
                anyhow::Ok(Some(SocketAddr::new(address, port)))
            };
        let http = served(cli.allow_http, &cli.http_address, &cli.http_port, "http")?;
        let grpc = served(cli.allow_grpc, &cli.grpc_address, &cli.grpc_port, "grpc")?;
        // Metrics listen on HTTP's address unless told otherwise, as in tritonserver; a
        // disabled HTTP's address that is none (which tritonserver would bind as
        // 255.255.255.255) leaves them on every interface.
        let metrics_address = cli
            .metrics_address
            .or_else(|| cli.http_address.ok())
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let config = Self {
            model_repositories,
            remote_repositories,
            initialization_error,
            control_mode,
            strict_model_config: cli.disable_auto_complete_config
                || cli.strict_model_config.unwrap_or(false),
            log_format,
            backend_settings,
            http,
            grpc,
            allow_vertex_ai: cli.allow_vertex_ai.unwrap_or(prediction),
            vertex_ai_port,
            metrics_address,
            http_restrictions: Arc::new(http_restrictions),
            grpc_restrictions: Arc::new(grpc_restrictions),
            http_header_forward,
            grpc_header_forward,
            metrics_config,
            trace,
            otlp,
            cli,
        };
        super::ports::check_collisions(&config)?;
        Ok(config)
    }
}

/// `Bad option: "--<flag>".` over Triton's reason, as tritonserver prints a refused value.
pub(super) fn bad_option(flag: &str, reason: &str) -> anyhow::Error {
    anyhow::anyhow!("Bad option: \"--{flag}\".\n{reason}")
}

/// The range checks tritonserver makes while parsing, with its messages, and Nereid's
/// own for its limits.
fn check_ranges(cli: &Cli) -> anyhow::Result<()> {
    if cli.http_max_input_size <= 0 {
        return Err(bad_option(
            "http-max-input-size",
            "Error: --http-max-input-size must be greater than 0.",
        ));
    }
    if let Some(threads) = cli.grpc_infer_thread_count {
        if !(2..=128).contains(&threads) {
            return Err(bad_option(
                "grpc-infer-thread-count",
                "invalid argument for --grpc_infer_thread_count. Must be in the range 2 to 128.",
            ));
        }
    }
    if cli
        .grpc_max_response_pool_size
        .is_some_and(|size| size <= 0)
    {
        return Err(bad_option(
            "grpc-max-response-pool-size",
            "Error: --grpc-max-response-pool-size must be greater than 0.",
        ));
    }
    // Nereid's own checks where Triton would start and misbehave.
    for (flag, value) in [
        ("grpc-keepalive-time", cli.grpc_keepalive_time),
        ("grpc-keepalive-timeout", cli.grpc_keepalive_timeout),
    ] {
        if value <= 0 {
            bail!("--{flag} must be greater than 0.");
        }
    }
    for (flag, value) in [
        ("grpc-max-input-size", cli.grpc_max_input_size),
        ("grpc-max-decompressed-size", cli.grpc_max_decompressed_size),
    ] {
        if value == 0 {
            bail!("--{flag} must be greater than 0.");
        }
    }
    if cli.max_connections == 0 {
        bail!("--max-connections must be greater than 0.");
    }
    if cli.metrics_interval_ms <= 0 {
        bail!("--metrics-interval-ms must be greater than 0.");
    }
    Ok(())
}

/// A `--model-repository` that is not a readable directory.
#[derive(Debug)]
struct Unreadable(String);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--model-repository {}: not a readable directory", self.0)
    }
}

impl std::error::Error for Unreadable {}

/// The repositories to serve: the flags' (a set in Triton: a repeat counts once), else
/// `AIP_STORAGE_URI`, else tritonserver's start-up error. A cloud repository is served
/// from its local copy, which is listed among the directories.
fn model_repositories(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<(Vec<PathBuf>, Vec<Arc<CloudMirror>>)> {
    let mut named: Vec<PathBuf> = Vec::new();
    for root in &cli.model_repository {
        if !named.contains(root) {
            named.push(root.clone());
        }
    }
    if named.is_empty() {
        if let Some(uri) = env("AIP_STORAGE_URI").filter(|uri| !uri.is_empty()) {
            named.push(PathBuf::from(uri));
        }
    }
    if named.is_empty() {
        bail!("creating server: Invalid argument - --model-repository must be specified");
    }
    let (mut roots, mut remotes) = (Vec::new(), Vec::new());
    for root in named {
        let text = root.to_string_lossy();
        if nereid_cloud::is_cloud(&text) {
            let mirror = CloudMirror::open(&text, env)
                .map_err(|e| anyhow::anyhow!("--model-repository {text}: {e}"))?;
            roots.push(nereid_core::repository::RemoteRepository::local_dir(&mirror).to_path_buf());
            remotes.push(Arc::new(mirror));
            continue;
        }
        if !root.is_dir() {
            return Err(Unreadable(text.into_owned()).into());
        }
        roots.push(root);
    }
    Ok((roots, remotes))
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
