//! Fills in Triton's defaults (so `/config` prints what Triton prints) and rejects
//! configurations Triton would reject, with Triton's wording.

use std::collections::HashSet;

use nereid_proto::inference::{
    model_instance_group::Kind, model_optimization_policy, model_version_policy, DataType,
    ModelInstanceGroup, ModelOptimizationPolicy, ModelVersionPolicy,
};

use super::is_ensemble;
use super::reshape;
use super::ModelConfig;
use crate::error::{Error, Result};

/// Sequence idle timeout Triton applies when the config leaves it at 0 (one second).
const DEFAULT_MAX_SEQUENCE_IDLE_US: u64 = 1_000_000;

/// The CUDA compute capability Triton's GPU checks name by default
/// (`--min-supported-compute-capability`, 6.0).
const MIN_COMPUTE_CAPABILITY: f64 = 6.0;

/// Facts about the server that the defaults depend on.
#[derive(Debug, Clone, Copy, Default)]
pub struct NormalizeOptions {
    /// Number of GPUs the CUDA driver shows: `KIND_GPU` groups are placed on them (all of
    /// them when a group lists none), and `KIND_AUTO` becomes `KIND_GPU` where there are
    /// some, unless the backend prefers CPU instances only.
    pub gpu_count: usize,
    /// Without any GPU, run `KIND_GPU` groups on the CPU instead of failing the load as
    /// Triton's CPU build does (`--gpu-instances-on-cpu`): a repository made for GPUs,
    /// served on a machine without one.
    pub gpu_instances_on_cpu: bool,
}

/// Whether GPU `id` is one of the `gpu_count` the server sees.
fn usable_gpu(id: i32, gpu_count: usize) -> bool {
    usize::try_from(id).is_ok_and(|id| id < gpu_count)
}

/// The GPUs of `ids` that exist among the `gpu_count` the server sees.
fn existing_gpus(ids: &[i32], gpu_count: usize) -> Vec<i32> {
    ids.iter()
        .copied()
        .filter(|&id| usable_gpu(id, gpu_count))
        .collect()
}

/// Normalizes `config` in place for the model stored in directory `model_name`, then
/// validates it.
pub fn normalize_and_validate(
    config: &mut ModelConfig,
    model_name: &str,
    options: NormalizeOptions,
) -> Result<()> {
    if config.name.is_empty() {
        config.name = model_name.to_string();
    }
    normalize_backend(config);
    let ensemble = is_ensemble(config);
    if ensemble {
        validate_ensemble_fields(config)?;
    }
    if config.version_policy.is_none() {
        config.version_policy = Some(ModelVersionPolicy {
            policy_choice: Some(model_version_policy::PolicyChoice::Latest(
                model_version_policy::Latest { num_versions: 1 },
            )),
        });
    }
    // Triton prints no optimization section for ensembles (and refuses one).
    if config.optimization.is_none() && !ensemble {
        config.optimization = Some(ModelOptimizationPolicy {
            input_pinned_memory: Some(model_optimization_policy::PinnedMemoryBuffer {
                enable: true,
            }),
            output_pinned_memory: Some(model_optimization_policy::PinnedMemoryBuffer {
                enable: true,
            }),
            ..Default::default()
        });
    }
    if let Some(seq) = sequence_batching_mut(config) {
        if seq.max_sequence_idle_microseconds == 0 {
            seq.max_sequence_idle_microseconds = DEFAULT_MAX_SEQUENCE_IDLE_US;
        }
    }
    normalize_instance_groups(config, options, &[])?;
    normalize_dynamic_batching(config)?;
    // An ensemble's step graph is checked by the ensemble loader (`ensemble::graph::Plan`).
    validate(config)?;
    // Triton compares the names after checking the configuration, whose messages name
    // the model as its configuration does.
    if config.name != model_name {
        return Err(Error::invalid_arg(format!(
            "unexpected directory name '{model_name}' for model '{}', directory name must equal model name",
            config.name
        )));
    }
    Ok(())
}

/// What an ensemble must not have, in Triton's words: a backend, another platform,
/// instance groups, an optimization policy or warmup.
fn validate_ensemble_fields(config: &ModelConfig) -> Result<()> {
    let model = &config.name;
    let refused = if config.platform == "ensemble" && !config.backend.is_empty() {
        Some(format!(
            "Ensemble model '{model}' must have platform type 'ensemble' and empty backend type"
        ))
    } else if super::ensembling(config).is_none() {
        Some(format!(
            "ensemble scheduling must be set for ensemble {model} whose platform is ensemble"
        ))
    } else if config.platform != "ensemble" {
        Some(format!(
            "ensemble scheduling cannot be set for model '{model}' whose platform is not ensemble"
        ))
    } else if !config.instance_group.is_empty() {
        Some(format!(
            "instance group should not be specified for ensemble '{model}'"
        ))
    } else if config.optimization.is_some() {
        Some(format!(
            "optimization should not be specified for ensemble '{model}'"
        ))
    } else if !config.model_warmup.is_empty() {
        Some(format!(
            "model_warmup can not be specified for ensemble '{model}'"
        ))
    } else {
        None
    };
    refused.map_or(Ok(()), |message| Err(Error::invalid_arg(message)))
}

/// Triton's defaults and checks for `dynamic_batching`.
fn normalize_dynamic_batching(config: &mut ModelConfig) -> Result<()> {
    use nereid_proto::inference::model_config::SchedulingChoice;
    use nereid_proto::inference::model_queue_policy::TimeoutAction;
    let model = config.name.clone();
    let max_batch_size = config.max_batch_size;
    let Some(SchedulingChoice::DynamicBatching(db)) = config.scheduling_choice.as_mut() else {
        return Ok(());
    };
    if db.preferred_batch_size.is_empty() && max_batch_size > 0 {
        db.preferred_batch_size.push(max_batch_size);
    }
    for &size in &db.preferred_batch_size {
        if size < 1 {
            return Err(Error::invalid_arg(format!(
                "dynamic batching preferred size must be positive for {model}"
            )));
        }
        if size > max_batch_size {
            return Err(Error::invalid_arg(format!(
                "dynamic batching preferred size must be <= max batch size for {model}"
            )));
        }
    }
    let levels = db.priority_levels;
    if levels > 0 && (db.default_priority_level < 1 || db.default_priority_level > levels) {
        return Err(Error::invalid_arg(format!(
            "default priority level must be in range [1, {levels}] for {model}"
        )));
    }
    // Triton checks the policies' levels only when there are levels: without them the
    // policies are never used (L0_config_json).
    if levels > 0
        && db
            .priority_queue_policy
            .keys()
            .any(|&k| k < 1 || k > levels)
    {
        return Err(Error::invalid_arg(format!(
            "priority queue policy must have priority level in range [1, {levels}] for {model}"
        )));
    }
    if db.preserve_ordering {
        if levels > 1 {
            return Err(Error::invalid_arg(format!(
                "Only one priority level is allowed when 'preserve_ordering' is true for {model}"
            )));
        }
        let delays = db
            .default_queue_policy
            .iter()
            .chain(db.priority_queue_policy.values())
            .any(|p| {
                p.timeout_action == TimeoutAction::Delay as i32
                    && p.default_timeout_microseconds != 0
            });
        if delays {
            return Err(Error::invalid_arg(format!(
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {model}"
            )));
        }
    }
    Ok(())
}

/// `platform: onnxruntime_onnx` and `backend: onnxruntime` imply each other.
fn normalize_backend(config: &mut ModelConfig) {
    if config.backend.is_empty() && config.platform == "onnxruntime_onnx" {
        config.backend = "onnxruntime".into();
    }
    if config.platform.is_empty() && config.backend == "onnxruntime" {
        config.platform = "onnxruntime_onnx".into();
    }
}

fn sequence_batching_mut(
    config: &mut ModelConfig,
) -> Option<&mut nereid_proto::inference::ModelSequenceBatching> {
    use nereid_proto::inference::model_config::SchedulingChoice;
    match config.scheduling_choice.as_mut() {
        Some(SchedulingChoice::SequenceBatching(seq)) => Some(seq),
        _ => None,
    }
}

/// Triton's `NormalizeInstanceGroup`: one group by default (shaped by the backend's
/// first usable `preferred` group), named `<model>_<index>`, `KIND_AUTO` resolved, count
/// and GPUs taken from a preferred group of the same kind, else defaulted. Triton runs
/// it before a backend initializes the model (and may auto-complete it), so the backend
/// sees the groups normalized; running it again after auto-completion changes nothing it
/// did.
pub fn normalize_instance_groups(
    config: &mut ModelConfig,
    options: NormalizeOptions,
    preferred: &[ModelInstanceGroup],
) -> Result<()> {
    if is_ensemble(config) {
        return Ok(());
    }
    let gpus = options.gpu_count;
    // Without any group, Triton makes one named after the model; unnamed groups that
    // the config lists are named `<model>_<index>`.
    if config.instance_group.is_empty() {
        config
            .instance_group
            .push(default_group(&config.name, preferred, gpus));
    }
    let model = config.name.clone();
    // A backend that prefers CPU instances only (OpenVINO, Nereid's own) keeps `KIND_AUTO`
    // groups on the CPU, where Triton puts them on a GPU and the backend fails the load.
    let cpu_only = !preferred.is_empty() && preferred.iter().all(|g| g.kind == Kind::Cpu as i32);
    let auto_on_gpu = gpus > 0 && !cpu_only;
    // Triton runs two CPU instances by default for the ONNX Runtime and TensorFlow backends.
    let cpu_default_count = if matches!(config.backend.as_str(), "onnxruntime" | "tensorflow") {
        2
    } else {
        1
    };
    for (index, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{model}_{index}");
        }
        let kind = Kind::try_from(group.kind).unwrap_or(Kind::Auto);
        // Triton's rule: GPU when there are GPUs and every one the group lists exists.
        let kind = match kind {
            Kind::Auto if auto_on_gpu && group.gpus.iter().all(|&id| usable_gpu(id, gpus)) => {
                Kind::Gpu
            }
            Kind::Auto => Kind::Cpu,
            Kind::Gpu if gpus == 0 && options.gpu_instances_on_cpu => {
                tracing::warn!(
                    "instance group {} of model {model} has kind KIND_GPU and there is no \
                     GPU: its instances run on the CPU (--gpu-instances-on-cpu)",
                    group.name
                );
                group.gpus.clear();
                Kind::Cpu
            }
            other => other,
        };
        group.kind = kind as i32;
        apply_preferred(group, kind, preferred, gpus);
        match kind {
            Kind::Gpu => {
                check_gpu_ids(group, &model, gpus)?;
                if group.gpus.is_empty() {
                    group.gpus = (0..gpus).filter_map(|id| i32::try_from(id).ok()).collect();
                }
            }
            Kind::Cpu | Kind::Model if !group.gpus.is_empty() => {
                return Err(Error::invalid_arg(format!(
                    "instance group {} of model {model} has kind {} but specifies one or more GPUs",
                    group.name,
                    kind.as_str_name()
                )));
            }
            _ => {}
        }
        if group.count < 1 {
            group.count = if kind == Kind::Cpu {
                cpu_default_count
            } else {
                1
            };
        }
    }
    Ok(())
}

/// The group Triton makes for a model that configures none: named after the model, with
/// the kind, count and GPUs of the first preferred group that can be used here (a
/// `KIND_GPU` one only where there are GPUs, and only with the GPUs it lists that exist).
fn default_group(model: &str, preferred: &[ModelInstanceGroup], gpus: usize) -> ModelInstanceGroup {
    let mut group = ModelInstanceGroup {
        name: model.to_string(),
        ..Default::default()
    };
    let usable = preferred
        .iter()
        .find(|pg| pg.kind != Kind::Gpu as i32 || gpus > 0);
    if let Some(pg) = usable {
        group.kind = pg.kind;
        group.count = pg.count;
        group.gpus = match Kind::try_from(pg.kind) {
            Ok(Kind::Gpu) => existing_gpus(&pg.gpus, gpus),
            Ok(Kind::Auto) => pg.gpus.clone(),
            _ => Vec::new(),
        };
    }
    group
}

/// Fills in what `group` (of the resolved `kind`) leaves out from the first preferred
/// group of that kind that fits, as Triton: a `KIND_GPU` group without GPUs takes the
/// preferred group's GPUs that exist (a preferred group none of whose GPUs exist is
/// passed over), a group without a count takes the preferred count.
fn apply_preferred(
    group: &mut ModelInstanceGroup,
    kind: Kind,
    preferred: &[ModelInstanceGroup],
    gpus: usize,
) {
    for pg in preferred.iter().filter(|pg| pg.kind == kind as i32) {
        if kind == Kind::Gpu && group.gpus.is_empty() && !pg.gpus.is_empty() {
            group.gpus = existing_gpus(&pg.gpus, gpus);
            if group.gpus.is_empty() {
                continue;
            }
        }
        if group.count < 1 && pg.count > 0 {
            group.count = pg.count;
        }
    }
}

/// Triton's `ValidateInstanceGroup` for a `KIND_GPU` group, in its words: the group
/// names no GPU while there are none, or a GPU that is not among the usable ones.
fn check_gpu_ids(
    group: &nereid_proto::inference::ModelInstanceGroup,
    model: &str,
    gpu_count: usize,
) -> Result<()> {
    if group.gpus.is_empty() && gpu_count == 0 {
        return Err(Error::invalid_arg(format!(
            "instance group {} of model {model} has kind KIND_GPU but no GPUs are available",
            group.name
        )));
    }
    match group.gpus.iter().find(|&&id| !usable_gpu(id, gpu_count)) {
        Some(id) => {
            let ids: Vec<String> = (0..gpu_count).map(|i| i.to_string()).collect();
            Err(Error::invalid_arg(format!(
                "instance group {} of model {model} specifies invalid or unsupported gpu id {id}. GPUs with at least the minimum required CUDA compute compatibility of {MIN_COMPUTE_CAPABILITY:.6} are: {}",
                group.name,
                ids.join(", ")
            )))
        }
        None => Ok(()),
    }
}

/// The backend a framework platform belongs to (Triton's `GetBackendTypeFromPlatform`).
fn backend_of_platform(platform: &str) -> Option<&'static str> {
    match platform {
        "tensorflow_graphdef" | "tensorflow_savedmodel" => Some("tensorflow"),
        "tensorrt_plan" => Some("tensorrt"),
        "onnxruntime_onnx" => Some("onnxruntime"),
        "pytorch_libtorch" => Some("pytorch"),
        _ => None,
    }
}

/// Triton's `ValidateModelMetrics`: each `metric_control` names a family and gives
/// histogram buckets.
fn validate_model_metrics(config: &ModelConfig) -> Result<()> {
    use nereid_proto::inference::model_metrics::metric_control::MetricOptions;
    for control in config.model_metrics.iter().flat_map(|m| &m.metric_control) {
        let refused = match (&control.metric_identifier, &control.metric_options) {
            (None, _) => "metric control must specify 'metric_identifier'",
            (Some(id), _) if id.family.is_empty() => {
                "metric identifier must specify non-empty 'family'"
            }
            (_, None) => "metric control must specify 'histogram_options'",
            (_, Some(MetricOptions::HistogramOptions(h))) if h.buckets.is_empty() => {
                "histogram options must specify non-empty 'buckets'"
            }
            _ => continue,
        };
        return Err(Error::invalid_arg(refused));
    }
    Ok(())
}

fn validate(config: &ModelConfig) -> Result<()> {
    let model = &config.name;
    // A framework backend must be named with its own platform; other backends take any.
    let framework_backend = matches!(
        config.backend.as_str(),
        "tensorflow" | "tensorrt" | "onnxruntime" | "pytorch"
    );
    if framework_backend
        && !config.platform.is_empty()
        && backend_of_platform(&config.platform) != Some(config.backend.as_str())
    {
        return Err(Error::invalid_arg(format!(
            "unexpected 'platform' and 'backend' pair, got:{}, {}",
            config.platform, config.backend
        )));
    }
    if config.max_batch_size < 0 {
        return Err(Error::invalid_arg(format!(
            "'max_batch_size' must be non-negative value for {model}"
        )));
    }
    validate_model_metrics(config)?;
    let mut seen = HashSet::new();
    for input in &config.input {
        let io = Io {
            what: "input",
            name: &input.name,
            data_type: input.data_type,
            dims: &input.dims,
            reshape: input.reshape.as_ref().map(|r| r.shape.as_slice()),
        };
        validate_io(config, &io)?;
        if !seen.insert(input.name.as_str()) {
            return Err(Error::invalid_arg(format!(
                "input '{}' specified multiple times for {model}",
                input.name
            )));
        }
    }
    seen.clear();
    for output in &config.output {
        let io = Io {
            what: "output",
            name: &output.name,
            data_type: output.data_type,
            dims: &output.dims,
            reshape: output.reshape.as_ref().map(|r| r.shape.as_slice()),
        };
        validate_io(config, &io)?;
        if !seen.insert(output.name.as_str()) {
            return Err(Error::invalid_arg(format!(
                "output '{}' specified multiple times for {model}",
                output.name
            )));
        }
    }
    Ok(())
}

/// One configured input or output, as Triton's `ValidateIOShape` checks it.
struct Io<'a> {
    /// `input` or `output`.
    what: &'a str,
    name: &'a str,
    data_type: i32,
    dims: &'a [i64],
    reshape: Option<&'a [i64]>,
}

/// Triton's `ValidateIOShape`, in its order, with its messages (and, as
/// `ValidateModelIOConfig` adds, ` for <model>` after each).
fn validate_io(config: &ModelConfig, io: &Io<'_>) -> Result<()> {
    let (model, what, name) = (&config.name, io.what, io.name);
    if name.is_empty() {
        return Err(Error::invalid_arg(format!(
            "model {what} must specify 'name' for {model}"
        )));
    }
    let known = DataType::try_from(io.data_type).is_ok_and(|t| t != DataType::TypeInvalid);
    if !known {
        return Err(Error::invalid_arg(format!(
            "model {what} '{name}' must specify 'data_type' for {model}"
        )));
    }
    let prefix = format!("model {what} '{name}' ");
    let for_model = |e: Error| Error::invalid_arg(format!("{} for {model}", e.message()));
    reshape::check_empty(&prefix, io.reshape, config.max_batch_size).map_err(for_model)?;
    if io.dims.iter().any(|&d| d < -1 || d == 0) {
        return Err(Error::invalid_arg(format!(
            "{prefix}dimension must be integer >= 1, or -1 to indicate a variable-size dimension for {model}"
        )));
    }
    if let Some(shape) = io.reshape {
        reshape::check(&prefix, name, io.dims, shape).map_err(for_model)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_model_config;
    use std::path::Path;

    fn normalized(text: &str) -> Result<ModelConfig> {
        let mut c = parse_model_config(Path::new("config.pbtxt"), text)?;
        normalize_and_validate(&mut c, "m", NormalizeOptions::default())?;
        Ok(c)
    }

    #[test]
    fn fills_triton_defaults() {
        let c = normalized(r#"platform: "onnxruntime_onnx""#).expect("valid");
        assert_eq!(c.name, "m");
        assert_eq!(c.backend, "onnxruntime");
        assert_eq!(c.instance_group[0].name, "m");
        assert_eq!(c.instance_group[0].kind, Kind::Cpu as i32);
        assert_eq!(c.instance_group[0].count, 2);
        assert!(matches!(
            c.version_policy.and_then(|p| p.policy_choice),
            Some(model_version_policy::PolicyChoice::Latest(l)) if l.num_versions == 1
        ));
        let c = normalized("instance_group [ { count: 1 }, { count: 3 } ]").expect("valid");
        assert_eq!(c.instance_group[1].name, "m_1");
        assert_eq!(c.instance_group[1].count, 3);
    }

    fn normalized_with_gpus(text: &str, gpu_count: usize) -> Result<ModelConfig> {
        let mut c = parse_model_config(Path::new("config.pbtxt"), text)?;
        let options = NormalizeOptions {
            gpu_count,
            ..Default::default()
        };
        normalize_and_validate(&mut c, "m", options)?;
        Ok(c)
    }

    #[test]
    fn gpu_groups_list_every_gpu_unless_they_name_some() {
        let c = normalized_with_gpus("backend: \"pytorch\" instance_group { kind: KIND_GPU }", 2)
            .expect("valid");
        assert_eq!(c.instance_group[0].gpus, vec![0, 1]);
        let c = normalized_with_gpus(
            "backend: \"pytorch\" instance_group { kind: KIND_GPU gpus: [ 1 ] count: 2 }",
            2,
        )
        .expect("valid");
        assert_eq!(c.instance_group[0].gpus, vec![1]);
        assert_eq!(c.instance_group[0].count, 2);
    }

    #[test]
    fn auto_goes_to_the_gpus_unless_the_backend_runs_on_the_cpu_or_a_listed_gpu_is_missing() {
        let kind_of = |text: &str, gpus: usize| {
            let c = normalized_with_gpus(text, gpus).expect("valid");
            (
                Kind::try_from(c.instance_group[0].kind).expect("kind"),
                c.instance_group[0].gpus.clone(),
            )
        };
        assert_eq!(kind_of("backend: \"pytorch\"", 1), (Kind::Gpu, vec![0]));
        assert_eq!(kind_of("backend: \"pytorch\"", 0), (Kind::Cpu, vec![]));
        // A backend preferring CPU instances only keeps a KIND_AUTO group on the CPU.
        let cpu_only = crate::backend::cpu_instances_only();
        let auto = "backend: \"onnxruntime\" instance_group { kind: KIND_AUTO count: 2 }";
        let only_cpu: Vec<(Kind, i32, &[i32])> = cpu_only
            .iter()
            .map(|g| (Kind::try_from(g.kind).expect("kind"), g.count, &[][..]))
            .collect();
        assert_eq!(with_preferred(auto, 2, &only_cpu), [(Kind::Cpu, 2, vec![])]);
        assert_eq!(
            with_preferred("backend: \"onnxruntime\"", 2, &only_cpu),
            [(Kind::Cpu, 2, vec![])]
        );
        // Not for a backend that also prefers GPU instances.
        let either: &[(Kind, i32, &[i32])] = &[(Kind::Cpu, 0, &[]), (Kind::Gpu, 0, &[])];
        assert_eq!(
            with_preferred(auto, 2, either),
            [(Kind::Gpu, 2, vec![0, 1])]
        );
        let err = normalized_with_gpus(
            "backend: \"pytorch\" instance_group { kind: KIND_AUTO gpus: [ 3 ] }",
            2,
        )
        .unwrap_err();
        assert!(
            err.message()
                .contains("has kind KIND_CPU but specifies one or more GPUs"),
            "{}",
            err.message()
        );
    }

    /// The groups of `text` normalized on `gpu_count` GPUs with the backend's `preferred`
    /// groups ((kind, count, gpus) each): (kind, count, gpus) of each.
    fn with_preferred(
        text: &str,
        gpu_count: usize,
        preferred: &[(Kind, i32, &[i32])],
    ) -> Vec<(Kind, i32, Vec<i32>)> {
        let preferred: Vec<ModelInstanceGroup> = preferred
            .iter()
            .map(|(kind, count, gpus)| ModelInstanceGroup {
                kind: *kind as i32,
                count: *count,
                gpus: gpus.to_vec(),
                ..Default::default()
            })
            .collect();
        let mut c = parse_model_config(Path::new("config.pbtxt"), text).expect("parses");
        c.name = "m".into();
        let options = NormalizeOptions {
            gpu_count,
            ..Default::default()
        };
        normalize_instance_groups(&mut c, options, &preferred).expect("valid");
        c.instance_group
            .iter()
            .map(|g| {
                (
                    Kind::try_from(g.kind).expect("kind"),
                    g.count,
                    g.gpus.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn a_model_without_groups_takes_the_first_usable_preferred_group() {
        let backend = "backend: \"openvino\"";
        // OpenVINO prefers the CPU: on a GPU machine its models stay there.
        assert_eq!(
            with_preferred(backend, 2, &[(Kind::Cpu, 0, &[])]),
            [(Kind::Cpu, 1, vec![])]
        );
        // A GPU preference is passed over without GPUs, and keeps the GPUs that exist.
        let gpu_then_cpu: &[(Kind, i32, &[i32])] = &[(Kind::Gpu, 2, &[1, 5]), (Kind::Cpu, 3, &[])];
        assert_eq!(
            with_preferred(backend, 0, gpu_then_cpu),
            [(Kind::Cpu, 3, vec![])]
        );
        assert_eq!(
            with_preferred(backend, 2, gpu_then_cpu),
            [(Kind::Gpu, 2, vec![1])]
        );
        // Without preferences, Triton's default: the GPUs where there are some.
        assert_eq!(
            with_preferred(backend, 2, &[]),
            [(Kind::Gpu, 1, vec![0, 1])]
        );
    }

    #[test]
    fn configured_groups_take_only_the_count_and_gpus_they_leave_out() {
        let preferred: &[(Kind, i32, &[i32])] = &[
            (Kind::Gpu, 4, &[7]),
            (Kind::Gpu, 2, &[1]),
            (Kind::Cpu, 3, &[]),
        ];
        let text = "backend: \"python\" instance_group [ { kind: KIND_GPU }, \
                    { kind: KIND_GPU count: 1 gpus: [ 0 ] }, { kind: KIND_CPU }, \
                    { kind: KIND_CPU count: 5 } ]";
        assert_eq!(
            with_preferred(text, 2, preferred),
            [
                // GPU 7 does not exist: the next GPU preference gives GPUs and count.
                (Kind::Gpu, 2, vec![1]),
                (Kind::Gpu, 1, vec![0]),
                (Kind::Cpu, 3, vec![]),
                (Kind::Cpu, 5, vec![]),
            ]
        );
    }

    #[test]
    fn without_gpus_gpu_groups_fail_unless_asked_to_run_on_the_cpu() {
        let text = "backend: \"pytorch\" instance_group { kind: KIND_GPU gpus: [ 0 ] }";
        assert!(normalized_with_gpus(text, 0).is_err());
        let mut c = parse_model_config(Path::new("config.pbtxt"), text).expect("parses");
        let options = NormalizeOptions {
            gpu_count: 0,
            gpu_instances_on_cpu: true,
        };
        normalize_and_validate(&mut c, "m", options).expect("runs on the CPU");
        let group = &c.instance_group[0];
        assert_eq!((group.kind, group.count), (Kind::Cpu as i32, 1));
        assert!(group.gpus.is_empty());
        // With GPUs the choice changes nothing: a missing GPU is still an error.
        let mut c = parse_model_config(
            Path::new("config.pbtxt"),
            text.replace("0 ]", "3 ]").as_str(),
        )
        .expect("parses");
        let options = NormalizeOptions {
            gpu_count: 2,
            gpu_instances_on_cpu: true,
        };
        assert!(normalize_and_validate(&mut c, "m", options).is_err());
    }

    #[test]
    fn rejects_gpu_without_gpus_and_bad_dims() {
        let err = normalized("instance_group { kind: KIND_GPU }").unwrap_err();
        assert_eq!(
            err.message(),
            "instance group m_0 of model m has kind KIND_GPU but no GPUs are available"
        );
        let err = normalized("instance_group { kind: KIND_GPU gpus: [ 0, 42 ] }").unwrap_err();
        assert_eq!(
            err.message(),
            "instance group m_0 of model m specifies invalid or unsupported gpu id 0. GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: "
        );
        let mut two_gpus = parse_model_config(
            Path::new("config.pbtxt"),
            "instance_group { kind: KIND_GPU gpus: [ 1, -1 ] }",
        )
        .expect("parses");
        let options = NormalizeOptions {
            gpu_count: 2,
            ..Default::default()
        };
        let err = normalize_and_validate(&mut two_gpus, "m", options).unwrap_err();
        assert!(
            err.message().ends_with("gpu id -1. GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: 0, 1"),
            "{}",
            err.message()
        );
        let err =
            normalized(r#"input { name: "x" data_type: TYPE_FP32 dims: [ -2 ] }"#).unwrap_err();
        assert!(err.message().contains("dimension"), "{}", err.message());
        assert_eq!(
            normalized(r#"name: "other""#).unwrap_err().message(),
            "unexpected directory name 'm' for model 'other', directory name must equal model name"
        );
        // The configuration is checked before the names are compared, as in Triton.
        assert!(normalized(r#"name: "other" max_batch_size: -1"#)
            .unwrap_err()
            .message()
            .starts_with("'max_batch_size' must be non-negative"));
    }

    #[test]
    fn model_metrics_controls_name_a_family_and_buckets() {
        let control = |body: &str| format!("model_metrics {{ metric_control [ {{ {body} }} ] }}");
        for (body, message) in [
            (
                "histogram_options { buckets: [ 1 ] }",
                "metric control must specify 'metric_identifier'",
            ),
            (
                "metric_identifier { } histogram_options { buckets: [ 1 ] }",
                "metric identifier must specify non-empty 'family'",
            ),
            (
                r#"metric_identifier { family: "nv_inference_first_response_histogram_ms" }"#,
                "metric control must specify 'histogram_options'",
            ),
            (
                r#"metric_identifier { family: "f" } histogram_options { }"#,
                "histogram options must specify non-empty 'buckets'",
            ),
        ] {
            assert_eq!(
                normalized(&control(body)).unwrap_err().message(),
                message,
                "{body}"
            );
        }
        assert!(normalized(&control(
            r#"metric_identifier { family: "f" } histogram_options { buckets: [ 1, 2 ] }"#
        ))
        .is_ok());
    }

    #[test]
    fn ensembles_refuse_backend_instances_and_optimization() {
        const ENSEMBLE: &str = r#"platform: "ensemble"
            input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
            output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
            ensemble_scheduling { step [ { model_name: "a" model_version: -1
              input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } ] }"#;
        let c = normalized(ENSEMBLE).expect("valid");
        assert!(c.instance_group.is_empty());
        assert!(c.optimization.is_none());
        for (extra, message) in [
            (
                r#"backend: "onnxruntime""#,
                "Ensemble model 'm' must have platform type 'ensemble' and empty backend type",
            ),
            (
                "instance_group [ { count: 1 } ]",
                "instance group should not be specified for ensemble 'm'",
            ),
            (
                "optimization { }",
                "optimization should not be specified for ensemble 'm'",
            ),
        ] {
            let err = normalized(&format!("{ENSEMBLE} {extra}")).unwrap_err();
            assert_eq!(err.message(), message);
        }
        let unscheduled =
            r#"platform: "ensemble" input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]"#;
        assert_eq!(
            normalized(unscheduled).unwrap_err().message(),
            "ensemble scheduling must be set for ensemble m whose platform is ensemble"
        );
        let err = normalized(&ENSEMBLE.replace(r#"platform: "ensemble""#, r#"platform: "x""#))
            .unwrap_err();
        assert!(err.message().contains("whose platform is not ensemble"));
        let err = normalized(r#"platform: "pytorch_libtorch" backend: "onnxruntime""#).unwrap_err();
        assert_eq!(
            err.message(),
            "unexpected 'platform' and 'backend' pair, got:pytorch_libtorch, onnxruntime"
        );
        // The backend ONNX Runtime's platform implies is no ensemble backend (L0_model_config).
        let onnx = ENSEMBLE.replace(r#"platform: "ensemble""#, r#"platform: "onnxruntime_onnx""#);
        assert_eq!(
            normalized(&onnx).unwrap_err().message(),
            "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble"
        );
    }

    #[test]
    fn sequence_idle_default_is_one_second() {
        let c = normalized("max_batch_size: 1 sequence_batching { }").expect("valid");
        assert!(matches!(
            c.scheduling_choice,
            Some(nereid_proto::inference::model_config::SchedulingChoice::SequenceBatching(s))
                if s.max_sequence_idle_microseconds == 1_000_000
        ));
    }
}
