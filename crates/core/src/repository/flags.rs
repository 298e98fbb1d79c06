//! tritonserver's model-repository flags beyond the control mode, in one place so the
//! binary, the C ABI and embedders pass them the same way: which configuration file a
//! model reads (`--model-config-name`), how many models load at once and how often a
//! failed load is retried (`--model-load-thread-count`, `--model-load-retry-count`),
//! whether repositories are namespaces (`--model-namespacing`), and where repository
//! agents would be found (`--repoagent-directory`).

use std::path::PathBuf;

/// tritonserver's default `--repoagent-directory`.
pub const DEFAULT_REPOAGENT_DIRECTORY: &str = "/opt/tritonserver/repoagents";

/// tritonserver's default `--model-load-thread-count`.
pub const DEFAULT_LOAD_THREAD_COUNT: u32 = 4;

/// The repository flags, with tritonserver's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepositoryFlags {
    /// `--model-config-name`: a model reads `<model>/configs/<name>.pbtxt` when that file
    /// exists, else `config.pbtxt` (`None`: always `config.pbtxt`).
    pub model_config_name: Option<String>,
    /// `--model-load-thread-count`: most models loading at once (0 counts as 1, as in
    /// Triton, whose load pool has at least one thread).
    pub load_thread_count: u32,
    /// `--model-load-retry-count`: how many more times a model version whose backend
    /// failed to load it is tried, right away, as Triton does.
    pub load_retry_count: u32,
    /// `--model-namespacing`: each repository is a namespace, so one model name may
    /// appear in several repositories; ensembles resolve their steps in their own.
    pub namespacing: bool,
    /// `--repoagent-directory`: where a repository agent other than the built-in
    /// `checksum` would be looked up (`<dir>/<agent>/libtritonrepoagent_<agent>.so`).
    pub repoagent_directory: PathBuf,
}

impl Default for RepositoryFlags {
    fn default() -> Self {
        Self {
            model_config_name: None,
            load_thread_count: DEFAULT_LOAD_THREAD_COUNT,
            load_retry_count: 0,
            namespacing: false,
            repoagent_directory: PathBuf::from(DEFAULT_REPOAGENT_DIRECTORY),
        }
    }
}

impl RepositoryFlags {
    /// How many model loads may run at once: at least one.
    pub fn load_threads(&self) -> usize {
        usize::try_from(self.load_thread_count.max(1)).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
#[path = "flags_tests.rs"]
mod tests;
