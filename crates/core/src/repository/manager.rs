//! The model table and the repository extension (index, load, unload) in the three
//! control modes. Requests read the table under a short read lock and take an `Arc` of
//! the model; loads run on blocking threads and swap the table entry when done, so
//! in-flight requests finish on the version they started with.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::RwLock;

use super::loader::{load_model, LoadSettings, VersionOutcomes};
use super::overrides::{check_files, write_model_dir, LoadRequest};
use super::record::{unload_set, ModelRecord, ModelState, Origin, VersionRecord, UNLOADED};
use super::registry::BackendRegistry;
use super::scan::{read_config, signature, ModelDirs, Signature};
use super::storage::{Storage, StorageLimits};
use crate::config::{config_from_json, is_ensemble, ModelConfig};
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
    config: ModelConfig,
    dir: Option<PathBuf>,
}

/// How the repository behaves.
#[derive(Clone)]
pub struct RepositoryOptions {
    /// `--model-repository` directories.
    pub roots: Vec<PathBuf>,
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
    backends: BackendRegistry,
    // Read on every request; written when a load or unload completes. Never held across
    // an await or a load.
    pub(super) table: RwLock<BTreeMap<String, ModelRecord>>,
    // Serializes load/unload/poll so two administrative operations never interleave.
    pub(super) admin: tokio::sync::Mutex<()>,
    // Every filesystem access goes through here, off the request threads.
    storage: Storage,
    // Repositories registered while the server runs (the SageMaker endpoint's archives).
    pub(super) registered: super::registered::Registered,
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

    /// Whether every model the server was asked to load is ready (Triton's strict readiness).
    pub fn all_ready(&self) -> bool {
        self.table
            .read()
            .values()
            .all(|r| r.error.is_none() && r.versions.values().all(|v| v.state == ModelState::Ready))
    }

    /// The repository index: every model directory, with its versions' states.
    pub async fn index(&self, ready_only: bool) -> Result<Vec<IndexEntry>> {
        let on_disk = self.scan().await?;
        let table = self.table.read();
        let mut names: Vec<&String> = on_disk.keys().chain(table.keys()).collect();
        names.sort();
        names.dedup();
        let mut entries = Vec::new();
        for id in names {
            let name = &self.model_name(id).to_string();
            let Some(record) = table.get(id) else {
                if !ready_only {
                    entries.push(IndexEntry {
                        name: name.clone(),
                        version: None,
                        state: None,
                        reason: String::new(),
                    });
                }
                continue;
            };
            if let Some(error) = &record.error {
                if !ready_only {
                    entries.push(IndexEntry {
                        name: name.clone(),
                        version: None,
                        state: Some(ModelState::Unavailable),
                        reason: error.clone(),
                    });
                }
            }
            for (&version, v) in &record.versions {
                if ready_only && v.state != ModelState::Ready {
                    continue;
                }
                entries.push(IndexEntry {
                    name: name.clone(),
                    version: Some(version),
                    state: Some(v.state),
                    reason: v.reason.clone(),
                });
            }
        }
        Ok(entries)
    }

    /// The repository extension's load: (re)loads `name`, optionally with a JSON config
    /// override and override files (see [`LoadRequest`]). Only in explicit mode, as in
    /// Triton. A request that fails before the model's backend is reached answers
    /// Triton's "failed to load '<name>', failed to poll from model repository" followed
    /// by the reason.
    pub async fn load(self: &Arc<Self>, name: &str, request: LoadRequest) -> Result<()> {
        self.require_explicit()?;
        let failed = |e: Error| {
            Error::new(
                e.kind(),
                format!(
                    "failed to load '{name}', failed to poll from model repository: {}",
                    e.message()
                ),
            )
        };
        let files = if request.files.is_empty() {
            None
        } else {
            Some(check_files(&request).map_err(failed)?)
        };
        let config = request
            .config
            .as_deref()
            .map(config_from_json)
            .transpose()
            .map_err(failed)?;
        let Some(files) = files else {
            return self
                .load_named(name, config.map(|config| Override { config, dir: None }))
                .await;
        };
        let written = tokio::task::spawn_blocking(move || write_model_dir(&files))
            .await
            .map_err(|e| Error::internal(format!("writing the override files failed: {e}")))
            .and_then(|written| written)
            .map_err(failed)?;
        let config = config.ok_or_else(|| Error::internal("checked above: config is set"))?;
        let dir = Some(written.path().to_path_buf());
        // The directory is removed once the load has read what it needs from it.
        let loaded = self.load_named(name, Some(Override { config, dir })).await;
        drop(written);
        loaded
    }

    /// The repository extension's unload. Only in explicit mode, as in Triton. Ensembles
    /// that use the model are unloaded with it (they cannot run without it); with
    /// `unload_dependents`, an ensemble's composing models go too unless they were loaded
    /// explicitly or another loaded ensemble still uses them.
    pub async fn unload(self: &Arc<Self>, name: &str, unload_dependents: bool) -> Result<()> {
        self.require_explicit()?;
        let _admin = self.admin.lock().await;
        let removed = {
            let mut table = self.table.write();
            // As in Triton, unloading a model that is not loaded succeeds.
            let ids = self.ids_named(table.keys(), name);
            let mut names = std::collections::BTreeSet::new();
            for id in &ids {
                names.extend(unload_set(&table, id, unload_dependents));
            }
            let mut removed = Vec::new();
            for n in &names {
                let Some(record) = table.get_mut(n) else {
                    continue;
                };
                for v in record.versions.values_mut() {
                    if let Some(model) = v.model.take() {
                        removed.push(model);
                    }
                    v.state = ModelState::Unavailable;
                    v.reason = UNLOADED.into();
                }
            }
            for n in &names {
                tracing::info!(model = %n, "successfully unloaded");
            }
            removed
        };
        stop_in_background(removed);
        Ok(())
    }

    /// Poll mode: loads new models, reloads changed ones, unloads removed ones.
    pub async fn poll(self: &Arc<Self>) -> Result<()> {
        let on_disk = self.scan().await?;
        let known: Vec<String> = self.table.read().keys().cloned().collect();
        for name in &known {
            if !on_disk.contains_key(name) {
                // Ensembles using a removed model go with it.
                let removed: Vec<(String, ModelRecord)> = {
                    let mut table = self.table.write();
                    unload_set(&table, name, false)
                        .into_iter()
                        .filter_map(|n| table.remove(&n).map(|r| (n, r)))
                        .collect()
                };
                for (name, record) in removed {
                    stop_in_background(
                        record
                            .versions
                            .into_values()
                            .filter_map(|v| v.model)
                            .collect(),
                    );
                    tracing::info!(model = %name, "removed from the repository: unloaded");
                }
            }
        }
        let mut changed_ids = Vec::new();
        for (name, dir) in &on_disk {
            let Ok(dir) = dir else { continue };
            let now = match self.dir_signature(name, dir).await {
                Ok(now) => now,
                Err(e) => {
                    tracing::error!(model = %name, error = %e, "cannot poll the model directory");
                    continue;
                }
            };
            let changed = self
                .table
                .read()
                .get(name)
                .is_none_or(|r| r.signature != now);
            if changed {
                changed_ids.push(name.clone());
            }
        }
        let _admin = self.admin.lock().await;
        self.load_many(changed_ids, on_disk).await.map(drop)
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

    fn require_explicit(&self) -> Result<()> {
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
    async fn config_of(&self, name: &str, dir: &Path) -> Result<Option<ModelConfig>> {
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

    pub(super) async fn load_unlocked(
        self: &Arc<Self>,
        name: &str,
        over: Option<Override>,
    ) -> Result<()> {
        let _admin = self.admin.lock().await;
        self.load_locked(name, over).await
    }

    /// Loads `name` as asked by a user; the caller holds the admin lock.
    pub(super) async fn load_locked(
        self: &Arc<Self>,
        name: &str,
        over: Option<Override>,
    ) -> Result<()> {
        self.load_any(name, over, true).await
    }

    /// Loads `name`, an ensemble (with its composing models) or any other model;
    /// `explicit` says whether a user asked for it rather than an ensemble needing it.
    /// Boxed because loading an ensemble loads its composing models through here.
    pub(super) fn load_any<'a>(
        self: &'a Arc<Self>,
        name: &'a str,
        over: Option<Override>,
        explicit: bool,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(async move {
            let (override_config, dir) = match over {
                Some(Override {
                    config,
                    dir: Some(dir),
                }) => (Some(config), dir),
                over => (over.map(|o| o.config), self.model_dir(name).await?),
            };
            let override_config = match override_config {
                None => self.mapped_config(name, &dir).await,
                given => given,
            };
            let ensemble = match &override_config {
                Some(config) => is_ensemble(config).then(|| config.clone()),
                // A configuration that cannot be read is reported by the ordinary load.
                None => self
                    .config_of(name, &dir)
                    .await
                    .ok()
                    .flatten()
                    .filter(is_ensemble),
            };
            match ensemble {
                Some(config) => self.load_ensemble(name, &dir, config, explicit).await,
                None => {
                    self.load_model_dir(name, dir, override_config, explicit)
                        .await
                }
            }
        })
    }

    /// The directory of model `name`, or Triton's error for a model not in any repository.
    pub(super) async fn model_dir(&self, name: &str) -> Result<PathBuf> {
        self.scan()
            .await?
            .remove(name)
            .ok_or_else(|| {
                Error::internal(format!(
                    "failed to load '{name}', failed to poll from model repository: no model directory named '{name}' in {}",
                    self.roots()
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?
    }

    /// Loads a model that is not an ensemble through its backend.
    async fn load_model_dir(
        self: &Arc<Self>,
        name: &str,
        dir: PathBuf,
        override_config: Option<crate::config::ModelConfig>,
        explicit: bool,
    ) -> Result<()> {
        let this = self.clone();
        let name_owned = self.model_name(name).to_string();
        let (signature, outcome) = match self
            .load_off_thread(name, move || {
                let outcome = load_model(
                    &this.backends,
                    &this.options.settings,
                    &name_owned,
                    &dir,
                    override_config,
                );
                (signature(&dir), outcome)
            })
            .await
        {
            Ok(loaded) => loaded,
            // The storage did not answer: the model keeps what it serves, and the next poll
            // tries again (an empty signature never matches the directory's).
            Err(e) => (Signature::default(), Err(e)),
        };
        let origin = Origin {
            explicit,
            composing: Vec::new(),
        };
        self.install(name, signature, origin, outcome)
    }

    /// Records a load's outcome in the table; the first failure becomes the call's error.
    pub(super) fn install(
        &self,
        name: &str,
        signature: Signature,
        origin: Origin,
        outcome: Result<VersionOutcomes>,
    ) -> Result<()> {
        let mut record = ModelRecord {
            signature,
            origin,
            ..Default::default()
        };
        let mut first_error = None;
        match outcome {
            Ok(versions) => {
                for (version, result) in versions {
                    let v = match result {
                        Ok(model) => VersionRecord {
                            state: ModelState::Ready,
                            reason: String::new(),
                            model: Some(model),
                        },
                        Err(e) => {
                            tracing::error!(model = %name, version, error = %e, "failed to load version");
                            let reason = e.message().to_string();
                            first_error.get_or_insert_with(|| {
                                Error::invalid_arg(format!(
                                    "load failed for model '{name}': version {version} is at UNAVAILABLE state: {reason};"
                                ))
                            });
                            VersionRecord {
                                state: ModelState::Unavailable,
                                reason,
                                model: None,
                            }
                        }
                    };
                    record.versions.insert(version, v);
                }
            }
            Err(e) => {
                record.error = Some(e.message().to_string());
                first_error = Some(Error::internal(format!(
                    "failed to load '{name}', failed to poll from model repository: {}",
                    e.message()
                )));
            }
        }
        let retired = {
            let mut table = self.table.write();
            let retired = match table.remove(name) {
                Some(previous) => keep_serving_where_reload_failed(name, previous, &mut record),
                None => Vec::new(),
            };
            table.insert(name.to_string(), record);
            retired
        };
        stop_in_background(retired);
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Triton's rule for a reload: a version that was serving keeps serving when its reload
/// fails (or when the whole load failed before any version was tried); the failure is
/// still answered to the caller and logged. Returns the previous models that `record`
/// replaces, to be stopped.
fn keep_serving_where_reload_failed(
    name: &str,
    previous: ModelRecord,
    record: &mut ModelRecord,
) -> Vec<Arc<LoadedModel>> {
    let failed_before_versions = record.error.is_some();
    let mut retired = Vec::new();
    for (version, old) in previous.versions {
        let Some(model) = old.model.clone() else {
            continue;
        };
        let reload_failed = match record.versions.get(&version) {
            Some(new) => new.model.is_none(),
            None => failed_before_versions,
        };
        if reload_failed {
            tracing::warn!(model = %name, version, "reload failed; the loaded version keeps serving");
            record.versions.insert(version, old);
        } else {
            retired.push(model);
        }
    }
    if failed_before_versions && !record.versions.is_empty() {
        // The model is still served as it was; the load answer carried the error.
        record.error = None;
    }
    retired
}

/// Stops replaced or unloaded models off the async runtime: their queued requests finish
/// first (requests still holding an `Arc` keep the model alive until they are answered).
fn stop_in_background(models: Vec<Arc<LoadedModel>>) {
    if models.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("model-unload".into())
        .spawn(move || {
            for m in models {
                m.stop();
            }
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
