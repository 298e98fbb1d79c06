//! The model table and the repository extension (index, load, unload) in the three
//! control modes. Requests read the table under a short read lock and take an `Arc` of
//! the model; loads run on blocking threads and swap the table entry when done, so
//! in-flight requests finish on the version they started with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use super::loader::{LoadSettings, VersionOutcomes};
use super::record::{ModelRecord, ModelState};
use super::registrations::Registered;
use super::registry::BackendRegistry;
use super::remote::RemoteRepository;
use super::scan::{read_config, signature, ModelDirs, Signature};
use super::storage::{Storage, StorageLimits};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::loaded::LoadedModel;

/// `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMode {
    /// Load everything at start-up; the repository is then fixed.
    None,
    /// Load everything and re-scan every `--repository-poll-secs`.
    Poll,
    /// Load only what `--load-model` or the load API asks for.
    Explicit,
}

/// What a user's load replaces: the configuration, and with override files the
/// directory the model loads from.
#[derive(Clone)]
pub(super) struct Override {
    pub(super) config: ModelConfig,
    pub(super) dir: Option<PathBuf>,
}

/// How the repository behaves.
#[derive(Clone)]
pub struct RepositoryOptions {
    /// `--model-repository` directories (a remote repository's local copy among them).
    pub roots: Vec<PathBuf>,
    /// The remote repositories, refreshed before each scan.
    pub remotes: Vec<Arc<dyn RemoteRepository>>,
    /// `--model-control-mode`.
    pub control_mode: ControlMode,
    /// `--load-model` names (explicit mode); `*` means all.
    pub startup_models: Vec<String>,
    /// Per-load settings.
    pub settings: LoadSettings,
    /// How long scans and loads may wait for the storage.
    pub storage: StorageLimits,
}

/// One row of the repository index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// Model name.
    pub name: String,
    /// Version, when the model has been loaded or tried.
    pub version: Option<i64>,
    /// State, when known.
    pub state: Option<ModelState>,
    /// Why it is not ready (empty when ready).
    pub reason: String,
}

/// The model table plus the operations of the repository extension.
pub struct ModelRepository {
    pub(super) options: RepositoryOptions,
    pub(super) backends: BackendRegistry,
    // Read on every request; written when a load or unload completes. Never held across
    // an await or a load.
    pub(super) table: RwLock<BTreeMap<String, ModelRecord>>,
    // Serializes load/unload/poll so two administrative operations never interleave.
    pub(super) admin: tokio::sync::Mutex<()>,
    // Every filesystem access goes through here, off the request threads.
    storage: Storage,
    // Repositories registered while the server runs (the SageMaker endpoint's archives).
    pub(super) registered: Registered,
}

impl ModelRepository {
    /// An empty repository; call [`Self::load_startup_models`] next.
    pub fn new(options: RepositoryOptions, backends: BackendRegistry) -> Self {
        Self {
            options,
            backends,
            table: RwLock::new(BTreeMap::new()),
            admin: tokio::sync::Mutex::new(()),
            storage: Storage::default(),
            registered: Default::default(),
        }
    }

    /// The server's response cache, if it has one.
    pub fn cache(&self) -> Option<&Arc<crate::cache::ResponseCache>> {
        self.options.settings.cache.as_ref()
    }

    /// The control mode.
    pub fn control_mode(&self) -> ControlMode {
        self.options.control_mode
    }

    /// The ready model `name` at `version` (highest ready version when `None`).
    pub fn get(&self, name: &str, version: Option<i64>) -> Result<Arc<LoadedModel>> {
        let table = self.table.read();
        let key = self.resolve(&table, name)?;
        let record = table.get(key.as_ref()).ok_or_else(|| unknown_model(name))?;
        let found = match version {
            Some(v) => {
                let record = record
                    .versions
                    .get(&v)
                    .ok_or_else(|| unknown_version(name, v))?;
                record.model.clone().ok_or_else(|| unknown_version(name, v))
            }
            None => record
                .versions
                .values()
                .rev()
                .find_map(|r| r.model.clone())
                .ok_or_else(|| {
                    Error::not_found(format!(
                        "Request for unknown model: '{name}' has no available versions"
                    ))
                }),
        };
        found
    }

    /// Every ready model version.
    pub fn ready_models(&self) -> Vec<Arc<LoadedModel>> {
        self.table
            .read()
            .values()
            .flat_map(|r| r.versions.values().filter_map(|v| v.model.clone()))
            .collect()
    }

    /// The ready versions of `name`, ascending, from the table (what model metadata lists;
    /// no directory is read).
    pub fn ready_versions(&self, name: &str) -> Vec<i64> {
        let table = self.table.read();
        let Ok(key) = self.resolve(&table, name) else {
            return Vec::new();
        };
        table.get(key.as_ref()).map_or_else(Vec::new, |r| {
            r.versions
                .iter()
                .filter(|(_, v)| v.state == ModelState::Ready)
                .map(|(version, _)| *version)
                .collect()
        })
    }

    /// Whether no model holds the server back from ready (Triton's strict readiness; see
    /// [`ModelRecord::holds_readiness`] for which models do).
    pub fn all_ready(&self) -> bool {
        self.table.read().values().all(|r| !r.holds_readiness())
    }

    /// Stops every model (server shutdown). Blocking.
    pub fn stop_all(&self) {
        let models: Vec<Arc<LoadedModel>> = std::mem::take(&mut *self.table.write())
            .into_values()
            .flat_map(|r| r.versions.into_values().filter_map(|v| v.model))
            .collect();
        for m in models {
            m.stop();
        }
    }

    pub(super) fn require_explicit(&self) -> Result<()> {
        if self.options.control_mode == ControlMode::Explicit {
            Ok(())
        } else {
            Err(Error::unavailable(
                "explicit model load / unload is not allowed if polling is enabled",
            ))
        }
    }

    /// Runs a read of the repository (`key` names what it touches, `what` completes the
    /// timeout message) off the request threads, under the scan time limit.
    pub(super) async fn read_off_thread<T: Send + 'static>(
        &self,
        key: &str,
        what: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        self.storage
            .run(key, what, self.options.storage.scan, work, drop)
            .await
    }

    /// Every model directory across the repositories.
    pub(super) async fn scan(&self) -> Result<ModelDirs> {
        let (roots, namespacing) = (self.options.roots.clone(), self.namespacing());
        let registered = self.registered.snapshot();
        if !self.options.remotes.is_empty() {
            // Copying models takes as long as loading them may, not a listing's time.
            let remotes = self.options.remotes.clone();
            let refresh = move || remotes.iter().try_for_each(|remote| remote.refresh());
            let (key, what) = ("cloud repositories", "copying the cloud repositories");
            let limit = self.options.storage.load;
            self.storage.run(key, what, limit, refresh, drop).await??;
        }
        self.read_off_thread("repository", "listing the model repositories", move || {
            registered.list(&roots, namespacing)
        })
        .await?
    }

    /// The change signature of model `name`'s directory.
    pub(super) async fn dir_signature(&self, name: &str, dir: &Path) -> Result<Signature> {
        let dir = dir.to_path_buf();
        let what = format!("reading the directory of model '{name}'");
        self.read_off_thread(&model_key(name), &what, move || signature(&dir))
            .await
    }

    /// The `config.pbtxt` of model `name`'s directory.
    pub(super) async fn config_of(&self, name: &str, dir: &Path) -> Result<Option<ModelConfig>> {
        let dir = dir.to_path_buf();
        let what = format!("reading the configuration of model '{name}'");
        let config_name = self.options.settings.flags.model_config_name.clone();
        self.read_off_thread(&model_key(name), &what, move || {
            read_config(&dir, config_name.as_deref())
        })
        .await?
    }

    /// Runs blocking filesystem work for model `name` under the load time limit; when it
    /// outlives the limit, the models it loads late are stopped.
    pub(super) async fn load_off_thread<T: Send + 'static>(
        &self,
        name: &str,
        work: impl FnOnce() -> (T, Result<VersionOutcomes>) + Send + 'static,
    ) -> Result<(T, Result<VersionOutcomes>)> {
        self.storage
            .run(
                &model_key(name),
                &format!("loading model '{name}'"),
                self.options.storage.load,
                work,
                |(_, late)| {
                    if let Ok(versions) = late {
                        stop_in_background(
                            versions.into_iter().filter_map(|(_, m)| m.ok()).collect(),
                        );
                    }
                },
            )
            .await
    }

    /// The directory model `name` is read from (a scan of the repositories, off the
    /// request threads): frontends find files that live beside a model's versions there,
    /// such as an LLM's tokenizer. Fails as [`Self::load`] does for a model not in any
    /// repository.
    pub async fn model_directory(&self, name: &str) -> Result<PathBuf> {
        self.model_dir(name).await
    }

    /// The directory of model `name`; for a model no repository holds, Triton's error
    /// ([`not_polled`]); for one several hold, the error naming the conflict.
    pub(super) async fn model_dir(&self, name: &str) -> Result<PathBuf> {
        self.scan()
            .await?
            .remove(name)
            .unwrap_or_else(|| Err(not_polled(name)))
    }
}

/// Triton's error for a model a load cannot find in the repositories (its reason, such as
/// a name several repositories hold, is only logged).
pub(super) fn not_polled(name: &str) -> Error {
    Error::internal(format!(
        "failed to load '{name}', failed to poll from model repository"
    ))
}

/// Logs Triton's poll error for a model name that no repository holds, as its repository
/// manager logs it for every such load (start-up and the load API) before failing it.
pub(super) fn log_not_in_any_repository(name: &str) {
    tracing::error!("failed to poll model '{name}': model not found in any model repository.");
}

/// Stops replaced or unloaded models off the async runtime: their queued requests finish
/// first (requests still holding an `Arc` keep the model alive until they are answered).
/// Then the heap's free pages go back to the system, so a server that loads and unloads
/// models does not keep every engine's freed buffers resident (`nereid_shm::heap`).
pub(super) fn stop_in_background(models: Vec<Arc<LoadedModel>>) {
    if models.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("model-unload".into())
        .spawn(move || {
            for m in models {
                m.stop();
            }
            nereid_shm::heap::release_free_memory();
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the unload thread");
    }
}

/// The storage key of everything read for model `name`.
pub(super) fn model_key(name: &str) -> String {
    format!("model:{name}")
}

fn unknown_model(name: &str) -> Error {
    Error::not_found(format!("Request for unknown model: '{name}' is not found"))
}

fn unknown_version(name: &str, version: i64) -> Error {
    Error::not_found(format!(
        "Request for unknown model: '{name}' version {version} is not found"
    ))
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
