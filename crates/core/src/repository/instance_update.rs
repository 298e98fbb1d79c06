//! A reload that changes nothing but a model's instance groups (or its version policy,
//! selecting the same versions) keeps the serving versions and changes their instances
//! in place, as Triton's model lifecycle does (core `model_lifecycle.cc` `AsyncLoad`,
//! `ConfigChangeRequiresReload`): instances of unchanged groups keep serving, requests in
//! flight are not disturbed, and only the added instances are initialized. Any other
//! change (another setting, a model file, a label file) loads the model anew.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::loader::VersionOutcomes;
use super::scan::{config_path, list_versions, Signature};
use super::version_policy::select_versions;
use crate::config::{normalize_and_validate, ModelConfig, NormalizeOptions};
use crate::loaded::LoadedModel;

/// Python's bytecode cache folder, left out of the comparison of model files.
const BYTECODE_CACHE: &str = "__pycache__";

/// What the serving versions of a model were loaded from: the configuration as the
/// repository (or the load request) gave it, before auto-completion, and the model
/// directory's fingerprint then.
#[derive(Clone)]
pub(super) struct ServedFrom {
    pub(super) config: ModelConfig,
    pub(super) signature: Signature,
}

/// A model that serves now, as a reload finds it.
pub(super) struct Serving {
    pub(super) from: ServedFrom,
    pub(super) versions: Vec<(i64, Arc<LoadedModel>)>,
}

/// Where the reload reads the model from.
pub(super) struct ReloadSite<'a> {
    /// The model's name (its configuration's).
    pub(super) name: &'a str,
    pub(super) dir: &'a Path,
    /// `--model-config-name`.
    pub(super) config_name: Option<&'a str>,
    pub(super) normalize: NormalizeOptions,
}

/// The reload of `serving` as an instance update, when `now` (what the reload reads)
/// differs only in instance groups and version policy from what it was loaded from (or
/// from the complete configuration it serves), selects the same versions, and no model
/// file changed. `None`: a full load is needed.
/// A version whose update fails keeps serving as it was (the outcome carries the error).
pub(super) fn update_in_place(
    serving: &Serving,
    now: &ServedFrom,
    site: &ReloadSite<'_>,
) -> Option<VersionOutcomes> {
    if serving.versions.is_empty() || !serving.versions.iter().all(|(_, m)| m.updates_instances()) {
        return None;
    }
    if !same_but_instances(&serving.from.config, &now.config)
        && !serving
            .versions
            .iter()
            .all(|(_, model)| restates(&model.config().message, &now.config, site))
    {
        return None;
    }
    let served: Vec<i64> = serving.versions.iter().map(|(v, _)| *v).collect();
    let selected = select_versions(now.config.version_policy.as_ref(), &list_versions(site.dir));
    if selected != served {
        return None;
    }
    let config_file = config_path(site.dir, site.config_name);
    let files_then = model_files(&serving.from.signature, site.dir, &config_file, &served);
    if files_then != model_files(&now.signature, site.dir, &config_file, &served) {
        return None;
    }
    let unchanged = serving.from.config.instance_group == now.config.instance_group;
    let outcomes = serving
        .versions
        .iter()
        .map(|(version, model)| {
            let updated = if unchanged {
                Ok(model.clone())
            } else {
                let mut config = model.config().message.clone();
                config.instance_group = now.config.instance_group.clone();
                normalize_and_validate(&mut config, site.name, site.normalize)
                    .and_then(|()| model.with_instance_groups(config))
                    .map(Arc::new)
            };
            if updated.is_ok() {
                // Triton reports an update as it reports a load.
                tracing::info!(model = %site.name, version, "successfully loaded");
            }
            (*version, updated)
        })
        .collect();
    Some(outcomes)
}

/// Whether two configurations are the same apart from what an instance update may
/// change (Triton's `ConfigChangeRequiresReload`).
fn same_but_instances(before: &ModelConfig, after: &ModelConfig) -> bool {
    let strip = |config: &ModelConfig| ModelConfig {
        instance_group: Vec::new(),
        version_policy: None,
        ..config.clone()
    };
    strip(before) == strip(after)
}

/// Whether `now` is `serving` (a version's complete configuration, as the configuration
/// endpoint gives it) written out again apart from instance groups and version policy:
/// a load request that sends back the configuration it read with a new instance count.
fn restates(serving: &ModelConfig, now: &ModelConfig, site: &ReloadSite<'_>) -> bool {
    let mut normalized = now.clone();
    normalize_and_validate(&mut normalized, site.name, site.normalize).is_ok()
        && same_but_instances(serving, &normalized)
}

/// The entries of a directory fingerprint that belong to the model's files for
/// `versions`: everything but the configuration file, other versions' folders and
/// Python's bytecode caches (a Python model's stub writes `__pycache__` beside the
/// sources on its first load whatever `PYTHONDONTWRITEBYTECODE` says; the sources
/// themselves are compared). A folder counts by its name only: its time changes with
/// what is added to it, which shows as entries of its own.
fn model_files(
    signature: &Signature,
    dir: &Path,
    config_file: &Path,
    versions: &[i64],
) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    signature
        .iter()
        .filter(|(path, _, _)| path != config_file)
        .filter(|(path, _, _)| !path.components().any(|c| c.as_os_str() == BYTECODE_CACHE))
        .filter(|(path, _, _)| of_versions(path, dir, versions))
        .map(|(path, size, time)| match path.is_dir() {
            true => (path.clone(), 0, None),
            false => (path.clone(), *size, *time),
        })
        .collect()
}

/// Whether `path` in model folder `dir` is outside every version folder or inside one
/// of `versions`.
fn of_versions(path: &Path, dir: &Path, versions: &[i64]) -> bool {
    let Ok(inside) = path.strip_prefix(dir) else {
        return true;
    };
    match inside.components().next() {
        Some(Component::Normal(first)) => match first.to_str().map(str::parse::<i64>) {
            Some(Ok(version)) => versions.contains(&version),
            _ => true,
        },
        _ => true,
    }
}

#[cfg(test)]
#[path = "instance_update_tests.rs"]
mod tests;
