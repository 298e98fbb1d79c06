//! Loading one model: configuration (file, override or auto-completed), backend choice,
//! version selection, then per version: spec, backend model, instances, scheduler.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use nereid_proto::inference::{model_config::SchedulingChoice, model_instance_group::Kind};

use crate::ensemble::Ensemble;

use super::scan::{list_versions, read_config};
use super::version_policy::select_versions;
use crate::backend::{Backend, InstanceConfig, InstanceKind};
use crate::cache::ResponseCache;
use crate::config::{normalize_and_validate, ModelConfig, NormalizeOptions};
use crate::error::{Error, Result};
use crate::loaded::LoadedModel;
use crate::model::ModelSpec;
use crate::scheduler::{
    DefaultScheduler, DynamicBatcher, InstancePool, Scheduler, SequenceBatcher,
    DEFAULT_QUEUE_CAPACITY,
};
use crate::stats::ModelStats;

/// Backends by the name used in `config.pbtxt`.
pub type BackendRegistry = HashMap<&'static str, Arc<dyn Backend>>;

/// Settings that apply to every load.
#[derive(Clone)]
pub struct LoadSettings {
    /// `--strict-model-config`: never auto-complete.
    pub strict_model_config: bool,
    /// Facts for normalization.
    pub normalize: NormalizeOptions,
    /// The server's response cache (`--cache-config`), for models that enable it.
    pub cache: Option<Arc<ResponseCache>>,
}

/// The outcome of loading one model: each selected version, loaded or failed.
pub type VersionOutcomes = Vec<(i64, Result<Arc<LoadedModel>>)>;

/// Loads every selected version of the model in `dir`. An error here means the model
/// could not even be read from the repository (Triton's "failed to poll" stage: missing
/// or unparseable configuration, no version directory); anything that goes wrong later
/// fails each selected version, which then shows as UNAVAILABLE with the reason.
pub fn load_model(
    backends: &BackendRegistry,
    settings: &LoadSettings,
    name: &str,
    dir: &Path,
    override_config: Option<ModelConfig>,
) -> Result<VersionOutcomes> {
    let config = match override_config {
        Some(c) => c,
        None => match read_config(dir)? {
            Some(c) => c,
            None if settings.strict_model_config => {
                return Err(Error::invalid_arg(format!(
                    "failed to load '{name}': {} is missing and auto-completion is disabled by --strict-model-config",
                    dir.join("config.pbtxt").display()
                )));
            }
            None => ModelConfig::default(),
        },
    };
    let versions = versions_to_load(&config, name, dir)?;
    let newest = *versions
        .last()
        .expect("versions_to_load returns at least one");
    let prepared = prepare(backends, settings, name, dir, newest, config);
    Ok(versions
        .into_iter()
        .map(|v| {
            let loaded = prepared.clone().and_then(|(backend, config, file_name)| {
                let file = dir.join(v.to_string()).join(file_name);
                load_version(backend.as_ref(), config, v, &file, settings)
            });
            (v, loaded.map(Arc::new))
        })
        .collect())
}

/// The versions of the model in `dir` that its version policy selects (at least one).
fn versions_to_load(config: &ModelConfig, name: &str, dir: &Path) -> Result<Vec<i64>> {
    let available = list_versions(dir);
    let versions = select_versions(config.version_policy.as_ref(), &available);
    if versions.is_empty() {
        return Err(Error::invalid_arg(format!(
            "at least one version must be available under the version policy of model '{name}'"
        )));
    }
    Ok(versions)
}

/// Loads every selected version of an ensemble whose configuration is normalized and
/// whose steps were checked (`ensemble`). Nothing is started: an ensemble has no
/// scheduler or instances of its own.
pub fn load_ensemble(
    settings: &LoadSettings,
    config: &ModelConfig,
    dir: &Path,
    ensemble: &Ensemble,
) -> Result<VersionOutcomes> {
    let versions = versions_to_load(config, &config.name, dir)?;
    Ok(versions
        .into_iter()
        .map(|version| {
            let loaded = model_cache(config, settings).and_then(|cache| {
                let spec = Arc::new(ModelSpec::new(config.clone(), version)?);
                tracing::info!(model = %spec.name, version, "successfully loaded");
                Ok(LoadedModel::ensemble(spec, ensemble.clone(), cache))
            });
            (version, loaded.map(Arc::new))
        })
        .collect())
}

/// Backend choice, auto-completion, normalization: everything shared by the versions.
fn prepare(
    backends: &BackendRegistry,
    settings: &LoadSettings,
    name: &str,
    dir: &Path,
    newest: i64,
    mut config: ModelConfig,
) -> Result<(Arc<dyn Backend>, ModelConfig, String)> {
    let backend = resolve_backend(backends, &mut config, name, &dir.join(newest.to_string()))?;
    let filename = |config: &ModelConfig| backend.model_filename(config);
    if !settings.strict_model_config {
        let file = dir.join(newest.to_string()).join(filename(&config));
        if file.exists() {
            backend.autocomplete(&mut config, &file)?;
        }
        if config.default_model_filename.is_empty() {
            config.default_model_filename = backend.default_model_filename().to_string();
        }
    }
    normalize_and_validate(&mut config, name, settings.normalize)?;
    let file_name = filename(&config);
    Ok((backend, config, file_name))
}

/// Picks the backend from `backend`, `platform`, or the model file present (filling the
/// config fields in, as Triton's auto-completion does).
fn resolve_backend(
    backends: &BackendRegistry,
    config: &mut ModelConfig,
    name: &str,
    newest_version_dir: &Path,
) -> Result<Arc<dyn Backend>> {
    if config.backend.is_empty() && config.platform == "onnxruntime_onnx" {
        config.backend = "onnxruntime".into();
    }
    if config.backend.is_empty() && config.platform.is_empty() {
        if let Some(b) = backends.values().find(|b| {
            b.detected_by_file() && newest_version_dir.join(b.default_model_filename()).exists()
        }) {
            config.backend = b.name().to_string();
        }
    }
    if config.backend.is_empty() {
        return Err(Error::invalid_arg(format!(
            "unexpected platform type '{}' for {name}",
            config.platform
        )));
    }
    backends.get(config.backend.as_str()).cloned().ok_or_else(|| {
        Error::invalid_arg(format!(
            "unable to find backend library for backend '{}', try specifying runtime on the model configuration.",
            config.backend
        ))
    })
}

/// The cache a model uses: the server's, when the model enables it and can be cached.
fn model_cache(
    config: &ModelConfig,
    settings: &LoadSettings,
) -> Result<Option<Arc<ResponseCache>>> {
    if !config.response_cache.as_ref().is_some_and(|c| c.enable) {
        return Ok(None);
    }
    if matches!(
        config.scheduling_choice,
        Some(SchedulingChoice::SequenceBatching(_))
    ) {
        return Err(Error::invalid_arg(format!(
            "Response Cache does not currently support model {} with sequence batching scheduler. Please disable the response cache.",
            config.name
        )));
    }
    if config
        .model_transaction_policy
        .as_ref()
        .is_some_and(|p| p.decoupled)
    {
        return Err(Error::invalid_arg(format!(
            "Response Cache does not currently support model {} with 'decoupled' transaction policy. Please disable the response cache.",
            config.name
        )));
    }
    Ok(settings.cache.clone())
}

fn load_version(
    backend: &dyn Backend,
    config: ModelConfig,
    version: i64,
    file: &Path,
    settings: &LoadSettings,
) -> Result<LoadedModel> {
    let cache = model_cache(&config, settings)?;
    if !file.exists() {
        return Err(Error::invalid_arg(format!(
            "unable to find '{}' for model '{}'",
            file.display(),
            config.name
        )));
    }
    let spec = Arc::new(ModelSpec::new(config, version)?);
    let model = backend.load_model(spec.clone(), file)?;
    let mut instances = Vec::new();
    for group in &spec.config.instance_group {
        if group.passive {
            continue;
        }
        let kind = match Kind::try_from(group.kind).unwrap_or(Kind::Cpu) {
            Kind::Gpu => InstanceKind::Gpu(group.gpus.first().copied().unwrap_or(0)),
            Kind::Model => InstanceKind::Model,
            Kind::Cpu | Kind::Auto => InstanceKind::Cpu,
        };
        for index in 0..group.count.max(1) {
            let instance = InstanceConfig {
                name: format!("{}_{index}", group.name),
                kind,
            };
            let backend_instance = model.create_instance(&instance)?;
            instances.push((instance.name, backend_instance));
        }
    }
    let stats = Arc::new(ModelStats::default());
    let count = instances.len();
    let scheduler: Box<dyn Scheduler> = match &spec.config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(_)) => {
            // One payload per instance at most: the batcher cuts a batch only for a free one.
            let (sender, receiver) = InstancePool::channel(count.max(1));
            let pool = InstancePool::start(spec.clone(), stats.clone(), instances, receiver)?;
            Box::new(DynamicBatcher::start(
                spec.clone(),
                stats.clone(),
                sender,
                pool,
                count,
            )?)
        }
        Some(SchedulingChoice::SequenceBatching(_)) => Box::new(SequenceBatcher::start(
            spec.clone(),
            stats.clone(),
            instances,
            file.parent().and_then(Path::parent),
        )?),
        _ => {
            let (sender, receiver) = InstancePool::channel(DEFAULT_QUEUE_CAPACITY);
            let pool = InstancePool::start(spec.clone(), stats.clone(), instances, receiver)?;
            Box::new(DefaultScheduler::new(sender, pool))
        }
    };
    tracing::info!(model = %spec.name, version, "successfully loaded");
    Ok(LoadedModel::new(spec, stats, scheduler, cache))
}
