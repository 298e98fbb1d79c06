//! [`Options`]: everything [`crate::Nereid::start`] needs, typed. The binary fills it from
//! tritonserver's flags; an embedding program (or `TRITONSERVER_ServerOptions`) fills it
//! directly. Network settings are not here: they belong to `nereid_serve::serve`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nereid_core::backend::BackendLoader;
use nereid_core::cache::CacheStore;
use nereid_core::log_settings::LogControl;
use nereid_core::metrics::MetricsConfig;
use nereid_core::rate_limit::ResourceLimit;
use nereid_core::repository::{BackendRegistry, RemoteRepository, RepositoryFlags, StorageLimits};
use nereid_core::scheduler::BatchStrategyLoader;
use nereid_core::shm::ShmLimits;
use nereid_core::ControlMode;
use nereid_core::Server;

/// How to start a [`crate::Nereid`]. Public fields with tritonserver's defaults, so a
/// caller names only what it changes (`Options { model_repositories, ..Default::default() }`).
#[derive(Clone)]
pub struct Options {
    /// Model repository directories (`--model-repository`, repeatable), the local copies
    /// of `remote_repositories` among them.
    pub model_repositories: Vec<PathBuf>,
    /// Repositories in cloud storage, each refreshed into its local copy before a scan.
    pub remote_repositories: Vec<Arc<dyn RemoteRepository>>,
    /// Which models load at start-up and whether load/unload calls are allowed
    /// (`--model-control-mode`).
    pub control_mode: ControlMode,
    /// Models to load at start-up in explicit mode, `*` for all (`--load-model`).
    pub startup_models: Vec<String>,
    /// Never auto-complete a model configuration (`--strict-model-config`, or
    /// `--disable-auto-complete-config`).
    pub strict_model_config: bool,
    /// Ready only while every model asked for is ready (`--strict-readiness`, default
    /// true as in Triton).
    pub strict_readiness: bool,
    /// Fail start-up when a model fails to load (`--exit-on-error`, default true as in
    /// Triton); false serves the models that did load.
    pub exit_on_error: bool,
    /// `--backend-directory`, for the settings backends are told
    /// ([`nereid_core::backend::cmdline_config`]).
    pub backend_directory: std::path::PathBuf,
    /// Why start-up failed before any model was looked at (an unreadable repository),
    /// when the process serves on anyway (`--exit-on-error=false`): the server then
    /// serves no model and is neither live nor ready, as Triton's.
    pub initialization_error: Option<String>,
    /// The server's name in server metadata (`--id`, default "triton" as in Triton, which
    /// some clients compare).
    pub id: String,
    /// `--backend-config` settings as (backend, key, value), the last one winning; see
    /// [`crate::backends`] for the ones the built-in backends read.
    pub backend_config: Vec<(String, String, String)>,
    /// Backends beyond the built-in ONNX Runtime ones, by name (an embedding program's
    /// own Rust backends, the tests' backend). One named like a built-in replaces it.
    pub extra_backends: BackendRegistry,
    /// Loads the backends named by models that no native backend serves (Triton's
    /// backend libraries from `--backend-directory`); `None`: such models fail to load.
    pub backend_loader: Option<Arc<dyn BackendLoader>>,
    /// Opens the custom batching libraries models name (`TRITON_BATCH_STRATEGY_PATH`,
    /// `batchstrategy.so`); `None`: such models fail to load.
    pub batch_strategies: Option<Arc<dyn BatchStrategyLoader>>,
    /// Called with the server once it exists, before any model loads: hosted backends
    /// call back into it (BLS requests, model readiness).
    pub on_server: Vec<ServerHook>,
    /// The response cache's store for models that enable it (`--cache-config`); `None`
    /// turns caching off. The caller picks and configures the store (local, redis, a
    /// TRITONCACHE library); start-up wraps it in the `ResponseCache` and starts it.
    pub cache: Option<Arc<dyn CacheStore>>,
    /// Seconds between repository polls in poll control mode (`--repository-poll-secs`);
    /// `None` is tritonserver's 15. Ignored in the other modes.
    pub repository_poll_secs: Option<u64>,
    /// How long shutdown waits for in-flight requests, then for the models to stop
    /// (`--exit-timeout-secs`, default 30 s as in Triton).
    pub exit_timeout: Duration,
    /// Whether and how much shared memory clients may register (`--allow-client-shm`,
    /// `--shm-max-regions`, `--shm-max-total-bytes`).
    pub shm_limits: ShmLimits,
    /// How long the repository waits for its storage (`--repository-timeout-secs`,
    /// `--model-load-timeout-secs`).
    pub storage_limits: StorageLimits,
    /// Read `<model>/configs/<name>.pbtxt` instead of `config.pbtxt` where it exists
    /// (`--model-config-name`).
    pub model_config_name: Option<String>,
    /// Most models loading at once (`--model-load-thread-count`, default 4; 0 counts as 1).
    pub model_load_thread_count: u32,
    /// How many more times a model version whose backend failed to load it is tried
    /// (`--model-load-retry-count`, default 0).
    pub model_load_retry_count: u32,
    /// Each repository is a namespace: one model name may appear in several, and
    /// ensembles resolve their steps in their own (`--model-namespacing`).
    pub model_namespacing: bool,
    /// Where repository agents other than the built-in `checksum` would be looked up
    /// (`--repoagent-directory`); a model naming one fails to load, naming this folder.
    pub repoagent_directory: PathBuf,
    /// The process's log settings, for Triton's logging extension (`/v2/logging`,
    /// `LogSettings`); `None` when the embedding program owns logging, and the extension
    /// then answers that dynamic logging is not supported.
    pub log_control: Option<Arc<LogControl>>,
    /// The latency metrics each model exports (`--metrics-config`).
    pub metrics_config: MetricsConfig,
    /// The trace extension's start-up settings (`--trace-config`).
    pub trace: nereid_core::trace::TraceOptions,
    /// `--rate-limit=execution_count` with the `--rate-limit-resource`s given (empty:
    /// each resource exists as often as the most any instance needs); `None` is
    /// `--rate-limit=off`, Triton's default.
    pub rate_limit: Option<Vec<ResourceLimit>>,
    /// The pinned host memory backends may hold (`--pinned-memory-pool-byte-size`,
    /// Triton's 256 MiB by default): pinned on demand up to this many bytes.
    pub pinned_memory_pool_bytes: u64,
    /// The CUDA memory pool of each GPU named (`--cuda-memory-pool-byte-size`,
    /// `(device, bytes)`); every other GPU's is Triton's 64 MiB.
    pub cuda_memory_pool_bytes: Vec<(i32, u64)>,
    /// Without any GPU, `KIND_GPU` groups run on the CPU rather than failing their
    /// model's load (`--gpu-instances-on-cpu`; Triton has no such choice).
    pub gpu_instances_on_cpu: bool,
    /// Where the `opentelemetry` trace mode's spans go (the binary passes its OTLP
    /// exporter); that mode is refused without one.
    pub span_sink: Option<Arc<dyn nereid_core::trace::SpanSink>>,
}

/// See [`Options::on_server`].
pub type ServerHook = Arc<dyn Fn(&Arc<Server>) + Send + Sync>;

/// tritonserver's default poll interval, in seconds.
pub const DEFAULT_REPOSITORY_POLL_SECS: u64 = 15;

impl Default for Options {
    /// tritonserver's defaults, with no repository (start-up then serves no models).
    fn default() -> Self {
        let flags = RepositoryFlags::default();
        Self {
            model_repositories: Vec::new(),
            remote_repositories: Vec::new(),
            control_mode: ControlMode::None,
            startup_models: Vec::new(),
            strict_model_config: false,
            strict_readiness: true,
            exit_on_error: true,
            initialization_error: None,
            backend_directory: crate::backends::DEFAULT_BACKEND_DIRECTORY.into(),
            id: "triton".to_string(),
            backend_config: Vec::new(),
            extra_backends: BackendRegistry::new(),
            backend_loader: None,
            batch_strategies: None,
            on_server: Vec::new(),
            cache: None,
            repository_poll_secs: None,
            exit_timeout: Duration::from_secs(30),
            shm_limits: ShmLimits::default(),
            storage_limits: StorageLimits::default(),
            model_config_name: flags.model_config_name,
            model_load_thread_count: flags.load_thread_count,
            model_load_retry_count: flags.load_retry_count,
            model_namespacing: flags.namespacing,
            repoagent_directory: flags.repoagent_directory,
            log_control: None,
            metrics_config: MetricsConfig::default(),
            trace: nereid_core::trace::TraceOptions::default(),
            span_sink: None,
            rate_limit: None,
            pinned_memory_pool_bytes: nereid_shm::pinned::DEFAULT_POOL_BYTES,
            cuda_memory_pool_bytes: Vec::new(),
            gpu_instances_on_cpu: false,
        }
    }
}

impl Options {
    /// The value of `backend,key` from [`Self::backend_config`], the last one winning (as
    /// repeated `--backend-config` flags do), else the global `key` (given without a
    /// backend name), as in Triton.
    pub fn backend_setting(&self, backend: &str, key: &str) -> Option<&str> {
        let find = |name: &str| {
            self.backend_config
                .iter()
                .rev()
                .find(|(b, k, _)| b == name && k == key)
                .map(|(_, _, v)| v.as_str())
        };
        find(backend).or_else(|| find(""))
    }

    /// The repository flags these options set, for the model repository.
    pub fn repository_flags(&self) -> RepositoryFlags {
        RepositoryFlags {
            model_config_name: self.model_config_name.clone(),
            load_thread_count: self.model_load_thread_count,
            load_retry_count: self.model_load_retry_count,
            namespacing: self.model_namespacing,
            repoagent_directory: self.repoagent_directory.clone(),
        }
    }

    /// The poll interval: [`Self::repository_poll_secs`] or the default, at least 1 s.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_secs(
            self.repository_poll_secs
                .unwrap_or(DEFAULT_REPOSITORY_POLL_SECS)
                .max(1),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_backend_setting_wins() {
        let setting = |v: &str| ("onnxruntime".into(), "k".into(), v.to_string());
        let options = Options {
            backend_config: vec![setting("1"), setting("2")],
            ..Options::default()
        };
        assert_eq!(options.backend_setting("onnxruntime", "k"), Some("2"));
        assert_eq!(options.backend_setting("onnxruntime", "other"), None);
        assert_eq!(options.poll_interval(), Duration::from_secs(15));
    }

    #[test]
    fn repository_flags_default_as_tritonserver() {
        let flags = Options::default().repository_flags();
        assert_eq!(flags, RepositoryFlags::default());
        assert_eq!(flags.load_thread_count, 4);
        assert_eq!(
            flags.repoagent_directory,
            PathBuf::from("/opt/tritonserver/repoagents")
        );
    }
}
