//! Loading one model: configuration (file, override or auto-completed), backend choice,
//! version selection, then per version: spec, backend model, instances, scheduler.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::agents::run_load_agents;
use super::backend_fields;
use super::flags::RepositoryFlags;
use super::registry::BackendRegistry;
use super::scan::{config_path, list_versions, read_config};
use super::version_policy::select_versions;
use super::warmup::warmup_samples;
use crate::backend::{Backend, ModelSite};
use crate::cache::ResponseCache;
use crate::classification::{read_labels, Labels};
use crate::config::{
    check_supported, normalize_and_validate, normalize_instance_groups, ModelConfig,
    NormalizeOptions, PublishedConfig,
};
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::loaded::LoadedModel;
use crate::metrics::MetricsConfig;
use crate::model::{ModelSpec, SchedulingSpec, MAX_INSTANCES};
use crate::rate_limit::RateLimiter;
use crate::scheduler::{
    create_passive, strategy_library, BatchStrategy, BatchStrategyLoader, DefaultScheduler,
    DynamicBatcher, InstancePool, InstanceSet, InstanceSource, Scheduler, SequenceBatcher,
    WarmupSample, DEFAULT_QUEUE_CAPACITY,
};
use crate::stats::histogram::first_response_histogram;
use crate::stats::ModelStats;

/// Settings that apply to every load.
#[derive(Clone)]
pub struct LoadSettings {
    /// `--strict-model-config`: never auto-complete.
    pub strict_model_config: bool,
    /// Facts for normalization.
    pub normalize: NormalizeOptions,
    /// The server's response cache (`--cache-config`), for models that enable it.
    pub cache: Option<Arc<ResponseCache>>,
    /// `--metrics-config`: the latency metrics each model exports.
    pub metrics: MetricsConfig,
    /// The repository flags: configuration name, load threads and retries, namespacing,
    /// repository agents.
    pub flags: RepositoryFlags,
    /// `--rate-limit=execution_count`: the limiter every instance registers with
    /// (`None`: `--rate-limit=off`, instances run as soon as they are free).
    pub rate_limiter: Option<Arc<RateLimiter>>,
    /// Opens the custom batching strategy libraries models name (Triton's C ABI);
    /// `None`: a model that names one fails to load.
    pub batch_strategies: Option<Arc<dyn BatchStrategyLoader>>,
}

impl LoadSettings {
    /// Statistics for a model version, exporting the latency metrics `--metrics-config`
    /// asks for (`cached`: the model uses the response cache), the first-response
    /// histogram with the bounds of the model's `model_metrics`.
    fn model_stats(&self, config: &ModelConfig, cached: bool) -> Result<Arc<ModelStats>> {
        let m = &self.metrics;
        let stats = ModelStats::new(
            m.counter_latencies,
            m.summary_latencies.then_some(&m.summary_quantiles[..]),
            cached,
        );
        Ok(Arc::new(if m.histogram_latencies {
            stats.with_first_response(first_response_histogram(config)?)
        } else {
            stats
        }))
    }
}

/// The outcome of loading one model: each selected version, loaded or failed.
pub type VersionOutcomes = Vec<(i64, Result<Arc<LoadedModel>>)>;

/// Loads every selected version of the model in `dir` from its source configuration
/// (see [`source_config`]). An error here means the model
/// could not even be read from the repository (Triton's "failed to poll" stage: missing
/// or unparseable configuration, a failing repository agent, no version directory);
/// anything that goes wrong later fails each selected version (after
/// `--model-load-retry-count` more tries), which then shows as UNAVAILABLE with the
/// reason.
pub fn load_model(
    backends: &BackendRegistry,
    settings: &LoadSettings,
    name: &str,
    dir: &Path,
    config: ModelConfig,
) -> Result<VersionOutcomes> {
    run_load_agents(name, &config, dir, &settings.flags.repoagent_directory)?;
    if list_versions(dir).is_empty() {
        // Triton completes the backend fields when it reads the repository, so a model
        // it cannot place is refused for that before its missing versions.
        backend_fields::complete(&mut config.clone(), name, &dir.join("0"))?;
    }
    if settings.strict_model_config {
        // Triton checks a configuration when it reads the repository, before it looks
        // for versions: without auto-completion the configuration is complete as
        // written, so its faults are the error even when no version folder exists.
        let mut checked = config.clone();
        normalize_and_validate(&mut checked, name, settings.normalize)?;
        ModelSpec::new(checked, 0)?;
    }
    let versions = versions_to_load(&config, name, dir)?;
    let newest = *versions
        .last()
        .expect("versions_to_load returns at least one");
    let mut prepared = prepare(backends, settings, name, dir, newest, config.clone());
    let mut outcomes = Vec::with_capacity(versions.len());
    for v in versions {
        // A backend may fail in auto-completion as in loading (a hosted backend
        // initializes the model for both), so a retry prepares again after a failure
        // there, as Triton's retry creates the whole model again.
        let loaded = with_retries(settings.flags.load_retry_count, name, v, |retry| {
            if retry && prepared.is_err() {
                prepared = prepare(backends, settings, name, dir, newest, config.clone());
            }
            let (backend, config, file_name) = prepared.clone()?;
            let file = dir.join(v.to_string()).join(file_name);
            load_version(backend.as_ref(), config, v, dir, &file, settings)
        });
        outcomes.push((v, loaded.map(Arc::new)));
    }
    Ok(outcomes)
}

/// The configuration a load of the model in `dir` starts from: the load request's
/// override, else the repository's file (an empty one to auto-complete when there is
/// none and auto-completion is on).
pub fn source_config(
    settings: &LoadSettings,
    name: &str,
    dir: &Path,
    override_config: Option<ModelConfig>,
) -> Result<ModelConfig> {
    if let Some(config) = override_config {
        return Ok(config);
    }
    let config_name = settings.flags.model_config_name.as_deref();
    match read_config(dir, config_name)? {
        Some(config) => Ok(config),
        None if settings.strict_model_config => Err(Error::invalid_arg(format!(
            "failed to load '{name}': {} is missing and auto-completion is disabled by --strict-model-config",
            config_path(dir, config_name).display()
        ))),
        None => Ok(ModelConfig::default()),
    }
}

/// Runs `load` once, and again up to `retries` more times while it fails, as Triton
/// retries a model version whose backend failed to load it; each failure that is tried
/// again is logged with Triton's words (the last one is recorded by the caller). `load`
/// is told whether it is a retry.
fn with_retries<T>(
    retries: u32,
    name: &str,
    version: i64,
    mut load: impl FnMut(bool) -> Result<T>,
) -> Result<T> {
    let mut attempt = 0;
    loop {
        match load(attempt > 0) {
            Err(e) if attempt < retries => {
                attempt += 1;
                tracing::error!(
                    "failed to load '{name}' version {version}: {e}; retrying ({attempt} of {retries})"
                );
            }
            result => return result,
        }
    }
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
/// scheduler or instances of its own. `step_labels`: the labels of the steps' outputs
/// that become ensemble outputs, for the outputs without a label file of their own.
pub fn load_ensemble(
    settings: &LoadSettings,
    config: &ModelConfig,
    dir: &Path,
    ensemble: &Ensemble,
    step_labels: &Labels,
) -> Result<VersionOutcomes> {
    let versions = versions_to_load(config, &config.name, dir)?;
    Ok(versions
        .into_iter()
        .map(|version| {
            let spec = ModelSpec::new(config.clone(), version).and_then(|mut spec| {
                spec.labels = read_labels(config, dir)?;
                spec.labels.inherit_all(step_labels);
                Ok(spec)
            });
            let started = Instant::now();
            let loaded = spec.and_then(|spec| {
                let cache = model_cache(&spec, settings)?;
                let stats = settings.model_stats(config, cache.is_some())?;
                tracing::info!(model = %spec.name, version, "successfully loaded");
                let published = Arc::new(PublishedConfig::new(config.clone()));
                let model = LoadedModel::ensemble(
                    Arc::new(spec),
                    published,
                    ensemble.clone(),
                    stats,
                    cache,
                );
                Ok(model.with_load_duration(started.elapsed()))
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
    check_supported(&config)?;
    let site = ModelSite {
        name,
        dir,
        version: newest,
    };
    let backend = resolve_backend(backends, &mut config, &site)?;
    let filename = |config: &ModelConfig| backend.model_filename(config);
    // The name is the model's, not its folder's (a load with override files reads from a
    // temporary folder): a backend auto-completing the config sees it, as in Triton.
    if config.name.is_empty() {
        config.name = name.to_string();
    }
    // The backend initializes (and may auto-complete) the model with its instance groups
    // normalized, its preferred groups applied, as Triton's (core `backend_model.cc`).
    normalize_instance_groups(
        &mut config,
        settings.normalize,
        &backend.preferred_instance_groups(),
    )?;
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

/// Picks the backend from `backend`, `platform`, the model file present or the model's
/// name (filling the config fields in, as Triton's auto-completion does). A backend
/// library is looked for from the model's `site` (its newest version loaded: Nereid
/// prepares the versions of a model together, where Triton resolves each version's).
fn resolve_backend(
    backends: &BackendRegistry,
    config: &mut ModelConfig,
    site: &ModelSite<'_>,
) -> Result<Arc<dyn Backend>> {
    let name = site.name;
    let newest_version_dir = &site.dir.join(site.version.to_string());
    if config.backend.is_empty() {
        // Triton's platform names and the backends that serve them.
        let backend = match config.platform.as_str() {
            "onnxruntime_onnx" => "onnxruntime",
            "tensorrt_plan" => "tensorrt",
            "pytorch_libtorch" => "pytorch",
            "tensorflow_graphdef" | "tensorflow_savedmodel" => "tensorflow",
            _ => "",
        };
        config.backend = backend.into();
    }
    if config.backend.is_empty() && config.platform.is_empty() {
        if let Some((_, b)) = backends.native().find(|(_, b)| {
            b.detected_by_file() && newest_version_dir.join(b.default_model_filename()).exists()
        }) {
            config.backend = b.name().to_string();
        }
    }
    backend_fields::complete(config, name, newest_version_dir)?;
    if config.backend.is_empty() {
        return Err(Error::invalid_arg(format!(
            "unexpected platform type '{}' for {name}",
            config.platform
        )));
    }
    backends.get(site, config)
}

/// The custom batching strategy of a model version in `model_dir`, loaded for the dynamic
/// batcher (the only scheduler that consults one). The library must be there whatever
/// the scheduler, as Triton checks; a sequence batcher cannot take one.
fn batch_strategy(
    spec: &Arc<ModelSpec>,
    model_dir: &Path,
    settings: &LoadSettings,
) -> Result<Option<Arc<dyn BatchStrategy>>> {
    if matches!(spec.scheduling, SchedulingSpec::Ensemble) {
        return Ok(None);
    }
    let loader = settings.batch_strategies.as_ref();
    let backend_dir = loader.and_then(|l| l.backend_directory(&spec.config.backend));
    let Some(library) = strategy_library(spec, model_dir, backend_dir.as_deref())? else {
        return Ok(None);
    };
    if !matches!(spec.scheduling, SchedulingSpec::Dynamic(_)) {
        return Ok(None);
    }
    let Some(loader) = loader else {
        return Err(Error::unsupported(format!(
            "model '{}' names the custom batching library {}, and this server cannot load batching libraries",
            spec.name,
            library.display()
        )));
    };
    tracing::info!(
        "Loading custom batching strategy library {} for model {}",
        library.display(),
        spec.name
    );
    loader.load(&library, spec, model_dir)
}

/// The cache a model uses: the server's, when the model enables it and can be cached.
fn model_cache(spec: &ModelSpec, settings: &LoadSettings) -> Result<Option<Arc<ResponseCache>>> {
    if !spec.response_cache {
        return Ok(None);
    }
    if matches!(spec.scheduling, SchedulingSpec::Sequence(_)) {
        return Err(Error::invalid_arg(format!(
            "Response Cache does not currently support model {} with sequence batching scheduler. Please disable the response cache.",
            spec.name
        )));
    }
    if spec.decoupled {
        return Err(Error::invalid_arg(format!(
            "Response Cache does not currently support model {} with 'decoupled' transaction policy. Please disable the response cache.",
            spec.name
        )));
    }
    Ok(settings.cache.clone())
}

fn load_version(
    backend: &dyn Backend,
    config: ModelConfig,
    version: i64,
    dir: &Path,
    file: &Path,
    settings: &LoadSettings,
) -> Result<LoadedModel> {
    let started = Instant::now();
    let mut spec = ModelSpec::new(config.clone(), version)?;
    // Triton reads the label files as the model initializes, before its backend loads it.
    spec.labels = read_labels(&config, dir)?;
    let spec = Arc::new(spec);
    let cache = model_cache(&spec, settings)?;
    let stats = settings.model_stats(&config, cache.is_some())?;
    let warmup = warmup_samples(&spec, &config, dir)?;
    if !file.exists() {
        return Err(Error::invalid_arg(format!(
            "unable to find '{}' for model '{}'",
            file.display(),
            spec.name
        )));
    }
    let model = backend.load_model(spec.clone(), file)?;
    let passive = create_passive(model.as_ref(), &spec, &stats)?;
    let strategy = batch_strategy(&spec, dir, settings)?;
    let source = InstanceSource {
        model,
        stats: stats.clone(),
        warmup,
        rate_limiter: settings.rate_limiter.clone(),
    };
    let pool_of = |receiver| {
        let (spec, stats) = (spec.clone(), stats.clone());
        move |instances, warmup: &[WarmupSample]| {
            InstancePool::start(spec, stats, instances, receiver, warmup).map(Arc::new)
        }
    };
    let (scheduler, instances): (Box<dyn Scheduler>, _) = match &spec.scheduling {
        SchedulingSpec::Dynamic(_) => {
            // Room for every payload the batcher may cut (one per instance) however the
            // instances change: it cuts a batch only for a free one.
            let (sender, receiver) = InstancePool::channel(MAX_INSTANCES);
            let (set, pool) = InstanceSet::start(&spec, source, pool_of(receiver))?;
            let count = pool.workers().len();
            let batcher = DynamicBatcher::start(spec.clone(), sender, pool, count, strategy)?;
            (Box::new(batcher), Some(set))
        }
        SchedulingSpec::Sequence(_) => {
            let model_dir = file.parent().and_then(Path::parent);
            let (set, batcher) = InstanceSet::start(&spec, source, |instances, warmup| {
                let (spec, stats) = (spec.clone(), stats.clone());
                SequenceBatcher::start(spec, stats, instances, model_dir, warmup).map(Arc::new)
            })?;
            (Box::new(batcher), Some(set))
        }
        SchedulingSpec::Default | SchedulingSpec::Ensemble => {
            let (sender, receiver) = InstancePool::channel(DEFAULT_QUEUE_CAPACITY);
            let (set, pool) = InstanceSet::start(&spec, source, pool_of(receiver))?;
            (Box::new(DefaultScheduler::new(sender, pool)), Some(set))
        }
    };
    tracing::info!(model = %spec.name, version, "successfully loaded");
    let published = Arc::new(PublishedConfig::new(config));
    let model = LoadedModel::new(spec, published, stats, scheduler, cache)
        .with_instance_set(instances)
        .with_passive_instances(passive)
        .with_gpu_inputs(backend.reads_gpu_inputs());
    Ok(model.with_load_duration(started.elapsed()))
}
