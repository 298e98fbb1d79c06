//! The command line: every flag `tritonserver` has (its `command_line_parser.cc`, the
//! list in `tests/data/tritonserver-flags.txt`), with its value syntax, defaults and
//! messages, plus Nereid's own limits. [`Cli`] is the raw flags, [`Config`] the validated
//! configuration the server is wired from.
//!
//! - [`values`]: Triton's value syntax (integers as `stoi`, booleans, pairs, addresses).
//! - [`errors`]: a refused command line printed in tritonserver's words.
//! - [`config`]: flags → [`Config`], the checks that span several flags.
//! - [`ports`]: tritonserver's port-collision check.
//! - [`no_effect`]: flags accepted for compatibility that change nothing here, said once.

mod config;
pub mod errors;
pub mod no_effect;
mod openai;
mod ports;
mod settings;
mod values;

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{ArgAction, Parser};

pub use config::{Config, GrpcCompressionLevel, RateLimitMode, RateLimitResource};
pub use openai::OpenAiFlags;
pub use values::NamedSetting;

/// Raw command-line flags, in tritonserver's groups (`--help` shows them so).
#[derive(Debug, Parser)]
// tritonserver parses with getopt_long: a flag given twice keeps its last value, and an
// unambiguous prefix of a long flag (`--log-warn`) names it; Triton's QA launch lines use both.
#[command(
    name = "nereid",
    version,
    about = "A Triton-compatible inference server",
    args_override_self = true,
    infer_long_args = true
)]
pub struct Cli {
    // ---- Server
    /// Server identifier reported in server metadata. `triton`, as tritonserver's `--id`
    /// default, because Triton's own client examples check the name.
    #[arg(long, default_value = "triton", help_heading = "Server")]
    pub id: String,
    /// Seconds to wait for in-flight requests at shutdown (negative is 0).
    #[arg(long, default_value_t = 30, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "Server")]
    pub exit_timeout_secs: i32,

    // ---- Logging
    /// Verbose log level (0 = off; `true` is 1, `false` 0).
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_parser = values::log_verbose, help_heading = "Logging")]
    pub log_verbose: u32,
    /// Log info messages.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Logging")]
    pub log_info: bool,
    /// Log warnings.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Logging")]
    pub log_warning: bool,
    /// Log errors.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Logging")]
    pub log_error: bool,
    /// default or ISO8601.
    #[arg(long, default_value = "default", help_heading = "Logging")]
    pub log_format: String,
    /// Write the log to this file (appending) instead of stderr; fixed for the process's
    /// life, as in Triton.
    #[arg(long, help_heading = "Logging")]
    pub log_file: Option<String>,

    // ---- Model Repository
    /// Model repository directory (repeatable). Without one, `AIP_STORAGE_URI` is used
    /// when set, as tritonserver does for Vertex AI.
    #[arg(
        long = "model-repository",
        visible_alias = "model-store",
        help_heading = "Model Repository"
    )]
    pub model_repository: Vec<PathBuf>,
    /// Exit at start-up when a model fails to load.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Model Repository")]
    pub exit_on_error: bool,
    /// Never auto-complete model configurations.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Model Repository")]
    pub disable_auto_complete_config: bool,
    /// Ready only when every model loaded.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Model Repository")]
    pub strict_readiness: bool,
    /// none, poll or explicit (any case).
    #[arg(long, default_value = "none", help_heading = "Model Repository")]
    pub model_control_mode: String,
    /// Poll interval in poll mode.
    #[arg(long, default_value_t = 15, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "Model Repository")]
    pub repository_poll_secs: i32,
    /// Model to load at start-up in explicit mode (repeatable; `*` loads all).
    #[arg(long, help_heading = "Model Repository")]
    pub load_model: Vec<String>,
    /// Load `<model>/configs/<name>.pbtxt` instead of `config.pbtxt` where it exists.
    #[arg(long, help_heading = "Model Repository")]
    pub model_config_name: Option<String>,
    /// Most models loading at once.
    #[arg(long, default_value_t = 4, value_parser = values::integer::<u32>, help_heading = "Model Repository")]
    pub model_load_thread_count: u32,
    /// Times a failed model load is retried.
    #[arg(long, default_value_t = 0, value_parser = values::integer::<u32>, help_heading = "Model Repository")]
    pub model_load_retry_count: u32,
    /// Let models of the same name live in different repositories (namespaces).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Model Repository")]
    pub model_namespacing: bool,
    /// CUDA peer access between GPUs; no effect without a GPU.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Model Repository")]
    pub enable_peer_access: Option<bool>,
    /// Seconds one model load may take (its files, backend model and instances) before it
    /// fails; the server keeps serving meanwhile (Nereid).
    #[arg(long, default_value_t = 600, help_heading = "Model Repository")]
    pub model_load_timeout_secs: u64,
    /// Seconds a repository listing or a `config.pbtxt` read may take before the
    /// operation that needs it fails, for a stalled mount (Nereid).
    #[arg(long, default_value_t = 30, help_heading = "Model Repository")]
    pub repository_timeout_secs: u64,

    // ---- HTTP
    /// Serve HTTP (default true, false under `AIP_MODE=PREDICTION`).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "HTTP")]
    pub allow_http: Option<bool>,
    /// HTTP bind address (an IP, `[::1]`, `ipv6:[::1]` or a host name); checked only
    /// when HTTP is served, as tritonserver ignores a disabled endpoint's address.
    #[arg(long, default_value = "0.0.0.0", allow_hyphen_values = true, value_parser = values::unchecked_address, help_heading = "HTTP")]
    pub http_address: values::Unchecked<IpAddr>,
    /// HTTP port (0 picks a free one); checked only when HTTP is served.
    #[arg(long, default_value = "8000", allow_hyphen_values = true, value_parser = values::unchecked_port, help_heading = "HTTP")]
    pub http_port: values::Unchecked<u16>,
    /// Let several servers listen on the HTTP port (SO_REUSEPORT).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "HTTP")]
    pub reuse_http_port: bool,
    /// Regular expression: HTTP request headers whose names it matches (anywhere,
    /// case-insensitively unless it starts `(?-i)`) reach the model as string request
    /// parameters on the infer endpoint.
    #[arg(long, allow_hyphen_values = true, help_heading = "HTTP")]
    pub http_header_forward_pattern: Option<String>,
    /// Threads for HTTP requests: sizes the shared network threads (see `--io-threads`).
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "HTTP")]
    pub http_thread_count: Option<i32>,
    /// `<apis>:<header>=<value>` (repeatable): the listed HTTP API groups answer only
    /// requests carrying that header with that value.
    #[arg(long, help_heading = "HTTP")]
    pub http_restricted_api: Vec<String>,
    /// Largest HTTP request JSON, raw input or decompressed body in bytes (Triton's
    /// default, 64 MiB); binary tensor data after the JSON is not limited by it (a body
    /// may be 2 GiB, or twice this limit when that is more).
    #[arg(long, default_value_t = nereid_http::DEFAULT_MAX_INPUT_SIZE as i64, allow_hyphen_values = true, value_parser = values::integer::<i64>, help_heading = "HTTP")]
    pub http_max_input_size: i64,

    // ---- GRPC
    /// Serve gRPC (default true, false under `AIP_MODE=PREDICTION`).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "GRPC")]
    pub allow_grpc: Option<bool>,
    /// gRPC bind address; checked only when gRPC is served.
    #[arg(long, default_value = "0.0.0.0", allow_hyphen_values = true, value_parser = values::unchecked_address, help_heading = "GRPC")]
    pub grpc_address: values::Unchecked<IpAddr>,
    /// gRPC port (0 picks a free one); checked only when gRPC is served.
    #[arg(long, default_value = "8001", allow_hyphen_values = true, value_parser = values::unchecked_port, help_heading = "GRPC")]
    pub grpc_port: values::Unchecked<u16>,
    /// Let several servers listen on the gRPC port (SO_REUSEPORT).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "GRPC")]
    pub reuse_grpc_port: bool,
    /// The same as `--http-header-forward-pattern` for the gRPC metadata of `ModelInfer`
    /// and `ModelStreamInfer` calls.
    #[arg(long, allow_hyphen_values = true, help_heading = "GRPC")]
    pub grpc_header_forward_pattern: Option<String>,
    /// Threads for gRPC inference (2 to 128): sizes the shared network threads.
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_infer_thread_count: Option<i32>,
    /// Triton's pool of reusable request/response objects; none here (accepted).
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_infer_allocation_pool_size: Option<i32>,
    /// Triton's cap on response objects held per stream (accepted; must be above 0).
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_max_response_pool_size: Option<i32>,
    /// Serve gRPC over TLS.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "GRPC")]
    pub grpc_use_ssl: bool,
    /// Serve gRPC over mutual TLS (implies `--grpc-use-ssl`).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "GRPC")]
    pub grpc_use_ssl_mutual: bool,
    /// PEM file holding the server certificate (chain).
    #[arg(long, default_value = "", help_heading = "GRPC")]
    pub grpc_server_cert: String,
    /// PEM file holding the server key.
    #[arg(long, default_value = "", help_heading = "GRPC")]
    pub grpc_server_key: String,
    /// PEM file holding the root certificate clients' certificates must chain to.
    #[arg(long, default_value = "", help_heading = "GRPC")]
    pub grpc_root_cert: String,
    /// none, low, medium or high.
    #[arg(long, default_value = "none", value_parser = config::compression_level, help_heading = "GRPC")]
    pub grpc_infer_response_compression_level: GrpcCompressionLevel,
    /// Milliseconds between the server's HTTP/2 keep-alive pings on a gRPC connection,
    /// which close connections to dead peers.
    #[arg(long, default_value_t = 7_200_000, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_keepalive_time: i32,
    /// Milliseconds a keep-alive ping may go unanswered before the connection is closed.
    #[arg(long, default_value_t = 20_000, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_keepalive_timeout: i32,
    /// Allow keep-alive pings on a connection with no call in flight.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "GRPC")]
    pub grpc_keepalive_permit_without_calls: bool,
    /// Most keep-alive pings the server sends while it sends no data (0: no limit).
    #[arg(long, default_value_t = 2, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_http2_max_pings_without_data: i32,
    /// Shortest interval, in ms, between a client's pings while no data flows; a
    /// shorter one is a ping strike.
    #[arg(long, default_value_t = 300_000, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_http2_min_recv_ping_interval_without_data: i32,
    /// Ping strikes tolerated before the connection is closed (0: no limit).
    #[arg(long, default_value_t = 2, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_http2_max_ping_strikes: i32,
    /// Milliseconds a connection may live before the server asks it to go away.
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_max_connection_age: Option<i32>,
    /// Milliseconds in-flight calls get to finish once a connection reached its age.
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "GRPC")]
    pub grpc_max_connection_age_grace: Option<i32>,
    /// `<protocols>:<key>=<value>` (repeatable): the listed gRPC API groups answer only
    /// calls carrying the metadata `triton-grpc-protocol-<key>` with that value.
    #[arg(long, help_heading = "GRPC")]
    pub grpc_restricted_protocol: Vec<String>,
    /// Largest gRPC request message in bytes as it arrives (Nereid's flag; the default is
    /// Triton's fixed bound, 2 GiB - 1).
    #[arg(long, default_value_t = nereid_grpc::message_limits::DEFAULT_MAX_INPUT_SIZE, help_heading = "GRPC")]
    pub grpc_max_input_size: usize,
    /// Largest gRPC request message in bytes once a compressed one is inflated (Nereid;
    /// Triton inflates to 2 GiB; the default is --http-max-input-size's, 64 MiB).
    #[arg(long, default_value_t = nereid_grpc::message_limits::DEFAULT_MAX_DECOMPRESSED_SIZE, help_heading = "GRPC")]
    pub grpc_max_decompressed_size: usize,
    /// Seconds a gRPC connection may stay open with no call in flight; 0 = no limit
    /// (Nereid).
    #[arg(long, default_value_t = nereid_net::DEFAULT_IDLE_TIMEOUT_SECS, help_heading = "GRPC")]
    pub grpc_idle_timeout_secs: u64,
    /// Seconds a unary gRPC call's request message may pause before the call fails; 0 =
    /// no limit (Nereid; a ModelStreamInfer stream's requests may pause at will).
    #[arg(long, default_value_t = nereid_net::DEFAULT_BODY_TIMEOUT_SECS, help_heading = "GRPC")]
    pub grpc_body_timeout_secs: u64,

    // ---- Sagemaker
    /// Serve the SageMaker endpoint.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Sagemaker")]
    pub allow_sagemaker: bool,
    /// SageMaker port.
    #[arg(long, default_value_t = 8080, allow_hyphen_values = true, value_parser = values::integer::<u16>, help_heading = "Sagemaker")]
    pub sagemaker_port: u16,
    /// `<low>-<high>`: the ports the other endpoints must use when SageMaker is served.
    #[arg(long, value_parser = values::port_range, help_heading = "Sagemaker")]
    pub sagemaker_safe_port_range: Option<(i32, i32)>,
    /// Threads for SageMaker requests: sizes the shared network threads.
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "Sagemaker")]
    pub sagemaker_thread_count: Option<i32>,

    // ---- Vertex
    /// Serve the Vertex AI endpoint (default true iff `AIP_MODE=PREDICTION`).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Vertex")]
    pub allow_vertex_ai: Option<bool>,
    /// Vertex AI port (default `AIP_HTTP_PORT`, else 8080).
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<u16>, help_heading = "Vertex")]
    pub vertex_ai_port: Option<u16>,
    /// Threads for Vertex AI requests: sizes the shared network threads.
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "Vertex")]
    pub vertex_ai_thread_count: Option<i32>,
    /// The model the predict route serves when the repository has several.
    #[arg(long, help_heading = "Vertex")]
    pub vertex_ai_default_model: Option<String>,

    // ---- Metrics
    /// Serve metrics.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Metrics")]
    pub allow_metrics: bool,
    /// Export the GPUs' utilization, memory, power and energy gauges (read through NVML,
    /// where the NVIDIA driver is installed).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Metrics")]
    pub allow_gpu_metrics: bool,
    /// Export the CPU utilization and memory gauges.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Metrics")]
    pub allow_cpu_metrics: bool,
    /// Metrics bind address (default: `--http-address`).
    #[arg(long, value_parser = values::address, help_heading = "Metrics")]
    pub metrics_address: Option<IpAddr>,
    /// Metrics port (0 picks a free one).
    #[arg(long, default_value_t = 8002, allow_hyphen_values = true, value_parser = values::integer::<u16>, help_heading = "Metrics")]
    pub metrics_port: u16,
    /// Milliseconds between two polls of the CPU utilization and memory gauges.
    #[arg(long, default_value_t = 2000, allow_hyphen_values = true, value_parser = values::integer::<i64>, help_heading = "Metrics")]
    pub metrics_interval_ms: i64,
    /// `<setting>=<value>` (repeatable): `counter_latencies`, `summary_latencies`,
    /// `histogram_latencies` (true/false) and `summary_quantiles` (`<quantile>:<error>,...`).
    #[arg(long, help_heading = "Metrics")]
    pub metrics_config: Vec<String>,

    // ---- Tracing
    /// `[<mode>,]<setting>=<value>` (repeatable): the trace extension's start-up settings
    /// (`level`, `rate`, `count`, `mode`, `triton,file`, `triton,log-frequency`).
    #[arg(long, help_heading = "Tracing")]
    pub trace_config: Vec<String>,

    // ---- Backend
    /// Where Triton backend libraries are: a model whose backend is not built in is
    /// served by `<dir>/<backend>/libtriton_<backend>.so` (default
    /// /opt/tritonserver/backends).
    #[arg(long, default_value = nereid_embed::backends::DEFAULT_BACKEND_DIRECTORY, help_heading = "Backend")]
    pub backend_directory: PathBuf,
    /// `<backend>,<key>=<value>` (repeatable).
    #[arg(long, help_heading = "Backend")]
    pub backend_config: Vec<String>,

    // ---- Repository Agent
    /// Where repository agent libraries would be; `checksum` is built in, and a model
    /// naming any other agent fails to load naming this directory.
    #[arg(
        long,
        default_value = "/opt/tritonserver/repoagents",
        help_heading = "Repository Agent"
    )]
    pub repoagent_directory: PathBuf,

    // ---- Response Cache
    /// `<cache>,<key>=<value>` (repeatable): the response cache (`local`, `redis` or a
    /// TRITONCACHE library's name).
    #[arg(long, help_heading = "Response Cache")]
    pub cache_config: Vec<String>,
    /// Where TRITONCACHE libraries are: `<dir>/<name>/libtritoncache_<name>.so` (default
    /// /opt/tritonserver/caches). Given explicitly, a library here named `local` or
    /// `redis` replaces the built-in cache of that name.
    #[arg(long, help_heading = "Response Cache")]
    pub cache_directory: Option<String>,

    // ---- Rate Limiter
    /// off or execution_count (any case).
    #[arg(long, default_value = "off", value_parser = config::rate_limit_mode, help_heading = "Rate Limiter")]
    pub rate_limit: RateLimitMode,
    /// `<name>:<count>[:<device>]` (repeatable): resources the rate limiter hands out.
    #[arg(long, value_parser = config::rate_limit_resource, help_heading = "Rate Limiter")]
    pub rate_limit_resource: Vec<RateLimitResource>,

    // ---- Memory/Device Management
    /// Pinned host memory backends may hold (pinned on demand up to this size).
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i64>, help_heading = "Memory/Device Management")]
    pub pinned_memory_pool_byte_size: Option<i64>,
    /// `<GPU device>:<bytes>` (repeatable): CUDA memory pool; none without a GPU.
    #[arg(long, value_parser = values::device_bytes, help_heading = "Memory/Device Management")]
    pub cuda_memory_pool_byte_size: Vec<(i32, u64)>,
    /// `<GPU device>:<bytes>` (repeatable): the CUDA virtual address size for growable
    /// implicit state; implicit state lives in host memory here.
    #[arg(long, value_parser = values::device_bytes, help_heading = "Memory/Device Management")]
    pub cuda_virtual_address_size: Vec<(i32, u64)>,
    /// Lowest CUDA compute capability a GPU must have to be used; no GPU is used.
    #[arg(long, value_parser = values::float, help_heading = "Memory/Device Management")]
    pub min_supported_compute_capability: Option<f64>,
    /// Threads Triton's buffer manager copies tensors with; tensors are not copied
    /// between devices here.
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i32>, help_heading = "Memory/Device Management")]
    pub buffer_manager_thread_count: Option<i32>,
    /// `<policy>,<setting>=<value>` (repeatable): Triton's host policies (`numa-node`,
    /// `cpu-cores`) for GPU instances.
    #[arg(long, value_parser = values::host_policy, help_heading = "Memory/Device Management")]
    pub host_policy: Vec<NamedSetting>,
    /// `<GPU device>:<fraction>` (repeatable): refuse GPU model loads past this memory
    /// share; no model loads on a GPU here.
    #[arg(long, value_parser = values::device_fraction, help_heading = "Memory/Device Management")]
    pub model_load_gpu_limit: Vec<(i32, f64)>,

    // ---- Shared Memory
    /// Let clients register, unregister and use system and CUDA shared-memory regions.
    /// Off by default, as in Triton after 2.51: any client reaching the port could
    /// otherwise make the server map another process's shared memory.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Shared Memory")]
    pub allow_client_shm: bool,
    /// Most shared-memory regions (system and CUDA together) clients may register; each
    /// system region holds a mapping and a file descriptor (Nereid).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=nereid_core::shm::MAX_MAPPINGS as u64), help_heading = "Shared Memory")]
    pub shm_max_regions: u64,
    /// Most bytes all registered shared-memory regions may span together (Nereid).
    #[arg(long, default_value_t = 64 << 30, help_heading = "Shared Memory")]
    pub shm_max_total_bytes: u64,

    // ---- DEPRECATED
    /// Deprecated: `--disable-auto-complete-config`.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "DEPRECATED")]
    pub strict_model_config: Option<bool>,
    /// Deprecated: the same as `--cache-config local,size=N`.
    #[arg(long, allow_hyphen_values = true, value_parser = values::integer::<i64>, help_heading = "DEPRECATED")]
    pub response_cache_byte_size: Option<i64>,
    /// Deprecated: `--trace-config triton,file=<path>`.
    #[arg(long, help_heading = "DEPRECATED")]
    pub trace_file: Option<String>,
    /// Deprecated: `--trace-config level=<OFF|TIMESTAMPS|TENSORS>` (repeatable).
    #[arg(long, help_heading = "DEPRECATED")]
    pub trace_level: Vec<String>,
    /// Deprecated: `--trace-config rate=<n>`.
    #[arg(long, allow_hyphen_values = true, help_heading = "DEPRECATED")]
    pub trace_rate: Option<String>,
    /// Deprecated: `--trace-config count=<n>`.
    #[arg(long, allow_hyphen_values = true, help_heading = "DEPRECATED")]
    pub trace_count: Option<String>,
    /// Deprecated: `--trace-config triton,log-frequency=<n>`.
    #[arg(long, allow_hyphen_values = true, help_heading = "DEPRECATED")]
    pub trace_log_frequency: Option<String>,

    // ---- Nereid's own
    /// Threads that serve the network (HTTP, gRPC, metrics, SageMaker, Vertex AI); model
    /// instances run on threads of their own. Default: the largest of the
    /// `--*-thread-count` flags given, at most the cores; else half the cores.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..), help_heading = "Nereid")]
    pub io_threads: Option<u16>,
    /// Most connections open at once on each port; the next one is closed at once and
    /// logged. Lowered at start-up to fit the open file limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_MAX_CONNECTIONS, help_heading = "Nereid")]
    pub max_connections: usize,
    /// Seconds a request's head may take to arrive, from its first byte, on the HTTP and
    /// metrics ports; 0 = no limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_HEADER_TIMEOUT_SECS, help_heading = "Nereid")]
    pub http_header_timeout_secs: u64,
    /// Seconds a request body may pause between two pieces on the HTTP and metrics
    /// ports; the request then fails with 408 and the connection closes. 0 = no limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_BODY_TIMEOUT_SECS, help_heading = "Nereid")]
    pub http_body_timeout_secs: u64,
    /// Seconds an HTTP or metrics connection may stay open with no request in flight;
    /// 0 = no limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_IDLE_TIMEOUT_SECS, help_heading = "Nereid")]
    pub http_idle_timeout_secs: u64,
    /// Seconds a write to a client may stay blocked (it reads nothing) on every port
    /// before its connection is closed; 0 = no limit.
    #[arg(long, default_value_t = nereid_net::DEFAULT_WRITE_TIMEOUT_SECS, help_heading = "Nereid")]
    pub write_timeout_secs: u64,
    /// On a machine without GPUs, run `KIND_GPU` instance groups on the CPU instead of
    /// failing their models' loads as Triton's CPU build does: a repository made for GPUs
    /// served on a CPU machine. Each such group is logged.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_parser = values::boolean, help_heading = "Nereid")]
    pub gpu_instances_on_cpu: bool,

    // ---- OpenAI
    /// The OpenAI-compatible port.
    #[command(flatten)]
    pub openai: OpenAiFlags,
}

#[cfg(test)]
mod tests;
