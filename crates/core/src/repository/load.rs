//! Loading: the repository extension's load (with configuration and file overrides),
//! the path every load takes (ensembles through `ensembles.rs`, other models through
//! their backend off the request threads), and recording the outcome in the table with
//! Triton's rule that a failed reload keeps the serving version.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use super::instance_update::{update_in_place, ReloadSite, ServedFrom, Serving};
use super::loader::{load_model, source_config, VersionOutcomes};
use super::manager::{log_not_in_any_repository, stop_in_background, ModelRepository, Override};
use super::overrides::{check_files, write_model_dir, LoadRequest};
use super::record::{ModelRecord, ModelState, Origin, VersionRecord};
use super::scan::{signature, Signature};
use crate::config::{config_from_json, is_ensemble};
use crate::error::{Error, Result};
use crate::loaded::LoadedModel;

impl ModelRepository {
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
                over => {
                    let dir = self.model_dir(name).await.inspect_err(|_| {
                        log_not_in_any_repository(name);
                    })?;
                    (over.map(|o| o.config), dir)
                }
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

    /// Loads a model that is not an ensemble through its backend, or, when only its
    /// instance groups changed, updates the serving versions' instances in place.
    async fn load_model_dir(
        self: &Arc<Self>,
        name: &str,
        dir: PathBuf,
        override_config: Option<crate::config::ModelConfig>,
        explicit: bool,
    ) -> Result<()> {
        let this = self.clone();
        let name_owned = self.model_name(name).to_string();
        let serving = self.serving(name);
        let ((signature, served_from), outcome) = match self
            .load_off_thread(name, move || {
                let signature = signature(&dir);
                let settings = &this.options.settings;
                let config = match source_config(settings, &name_owned, &dir, override_config) {
                    Ok(config) => config,
                    Err(e) => return ((signature, None), Err(e)),
                };
                let from = ServedFrom { config, signature };
                let site = ReloadSite {
                    name: &name_owned,
                    dir: &dir,
                    config_name: settings.flags.model_config_name.as_deref(),
                    normalize: settings.normalize,
                };
                let outcome = match serving.and_then(|s| update_in_place(&s, &from, &site)) {
                    Some(updated) => Ok(updated),
                    None => load_model(
                        &this.backends,
                        settings,
                        &name_owned,
                        &dir,
                        from.config.clone(),
                    ),
                };
                ((from.signature.clone(), Some(from)), outcome)
            })
            .await
        {
            Ok(loaded) => loaded,
            // The storage did not answer: the model keeps what it serves, and the next poll
            // tries again (an empty signature never matches the directory's).
            Err(e) => ((Signature::default(), None), Err(e)),
        };
        let origin = Origin {
            explicit,
            composing: Vec::new(),
        };
        self.install_served(name, signature, origin, outcome, served_from)
    }

    /// The versions of `name` serving now, and what they were loaded from; `None` when
    /// nothing serves or the model cannot be updated in place.
    fn serving(&self, name: &str) -> Option<Serving> {
        let table = self.table.read();
        let record = table.get(name)?;
        let from = record.served_from.clone()?;
        let versions = record
            .versions
            .iter()
            .filter_map(|(v, r)| Some((*v, r.model.clone()?)))
            .collect();
        Some(Serving { from, versions })
    }

    /// Records a load's outcome in the table; the first failure becomes the call's error.
    pub(super) fn install(
        &self,
        name: &str,
        signature: Signature,
        origin: Origin,
        outcome: Result<VersionOutcomes>,
    ) -> Result<()> {
        self.install_served(name, signature, origin, outcome, None)
    }

    /// [`Self::install`], recording what the versions were loaded from (`served_from`).
    fn install_served(
        &self,
        name: &str,
        signature: Signature,
        origin: Origin,
        outcome: Result<VersionOutcomes>,
        served_from: Option<ServedFrom>,
    ) -> Result<()> {
        let mut record = ModelRecord {
            signature,
            origin,
            served_from,
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
                            // Triton's line, with its status text (L0_model_config greps it).
                            tracing::error!(
                                "failed to load '{name}' version {version}: {}: {}",
                                e.kind().triton_name(),
                                e.message()
                            );
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
        let replacement = record.versions.get(&version).map(|new| new.model.as_ref());
        let reload_failed = match replacement {
            Some(new) => new.is_none(),
            None => failed_before_versions,
        };
        if reload_failed {
            tracing::warn!(model = %name, version, "reload failed; the loaded version keeps serving");
            record.versions.insert(version, old);
            // What serves is still what the previous load read.
            record.served_from = previous.served_from.clone();
        } else if !replacement
            .flatten()
            .is_some_and(|new| new.shares_runner(&model))
        {
            // Not when an instance update made the new version of this one.
            retired.push(model);
        }
    }
    if failed_before_versions && !record.versions.is_empty() {
        // The model is still served as it was; the load answer carried the error.
        record.error = None;
    }
    retired
}
