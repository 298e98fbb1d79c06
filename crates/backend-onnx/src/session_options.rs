//! Creating an ORT session with the options Triton's ONNX Runtime backend reads from the
//! model configuration: `parameters` `intra_op_thread_count`, `inter_op_thread_count`,
//! `execution_mode`, `enable_mem_arena`, `enable_mem_pattern`,
//! `session.use_device_allocator_for_initializers`, and
//! `optimization { graph { level } }`; and the run options of each execution
//! (`memory.enable_memory_arena_shrinkage`). Each is logged at the verbose level with
//! the backend's words, which Triton's QA reads (L0_onnx_optimization).

use std::path::Path;

use ort::ep::ExecutionProviderDispatch;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session};

use nereid_core::model::ModelSpec;
use nereid_core::{Error, Result};

/// Builds a session for `model_file` configured from `spec`, on the CPU.
pub fn build_session(
    environment: &ort::environment::Environment,
    spec: &ModelSpec,
    model_file: &Path,
) -> Result<Session> {
    build_session_on(environment, spec, model_file, &[])
}

/// Builds a session for `model_file` configured from `spec`, registering `providers`
/// (each must succeed) ahead of the CPU.
pub fn build_session_on(
    environment: &ort::environment::Environment,
    spec: &ModelSpec,
    model_file: &Path,
    providers: &[ExecutionProviderDispatch],
) -> Result<Session> {
    let fail = load_error(&spec.name, model_file);
    let mut builder =
        Session::builder(environment).map_err(|e| fail("session options", e.to_string()))?;
    if let Some(n) = parameter_usize(spec, "intra_op_thread_count")? {
        builder = builder
            .with_intra_threads(n)
            .map_err(|e| fail("intra_op_thread_count", e.to_string()))?;
    }
    if let Some(n) = parameter_usize(spec, "inter_op_thread_count")? {
        builder = builder
            .with_inter_threads(n)
            .map_err(|e| fail("inter_op_thread_count", e.to_string()))?;
    }
    if let Some(mode) = parameter_usize(spec, "execution_mode")? {
        builder = builder
            .with_parallel_execution(mode == 1)
            .map_err(|e| fail("execution_mode", e.to_string()))?;
    }
    if let Some(value) = spec.parameters.get(DEVICE_ALLOCATOR_FOR_INITIALIZERS) {
        tracing::debug!(
            "Configuring '{DEVICE_ALLOCATOR_FOR_INITIALIZERS}' to '{value}' for '{}'",
            spec.name
        );
        builder = builder
            .with_config_entry(DEVICE_ALLOCATOR_FOR_INITIALIZERS, value)
            .map_err(|e| fail(DEVICE_ALLOCATOR_FOR_INITIALIZERS, e.to_string()))?;
    }
    let mut providers = providers.to_vec();
    if let Some((value, enable)) = parameter_bool(spec, "enable_mem_arena")? {
        // The CPU provider's registration is what switches ORT's CPU arena.
        providers.push(ort::ep::CPU::default().with_arena_allocator(enable).build());
        tracing::debug!("Configuring enable_mem_arena to {value}");
    }
    if let Some((value, enable)) = parameter_bool(spec, "enable_mem_pattern")? {
        builder = builder
            .with_memory_pattern(enable)
            .map_err(|e| fail("enable_mem_pattern", e.to_string()))?;
        tracing::debug!("Configuring enable_mem_pattern to {value}");
    }
    if !providers.is_empty() {
        builder = builder
            .with_execution_providers(&providers)
            .map_err(|e| fail("execution provider", e.to_string()))?;
    }
    builder = builder
        .with_optimization_level(optimization_level(spec))
        .map_err(|e| fail("graph optimization level", e.to_string()))?;
    builder
        .commit_from_file(model_file)
        .map_err(|e| fail("ONNX Runtime could not create a session", e.to_string()))
}

/// The options every execution of `spec`'s instances runs with: ORT's arena shrinkage
/// after each run when `memory.enable_memory_arena_shrinkage` names devices (`cpu:0`).
/// `None`: ORT's defaults.
pub fn run_options(spec: &ModelSpec) -> Result<Option<RunOptions>> {
    let Some(value) = spec.parameters.get(ARENA_SHRINKAGE) else {
        return Ok(None);
    };
    tracing::debug!("Configuring {ARENA_SHRINKAGE} to {value}");
    let failed = |e: ort::Error| {
        Error::invalid_arg(format!(
            "model '{}': parameter '{ARENA_SHRINKAGE}': {e}",
            spec.name
        ))
    };
    let mut options = RunOptions::new().map_err(failed)?;
    options.set(ARENA_SHRINKAGE, value).map_err(failed)?;
    Ok(Some(options))
}

/// The session configuration entry Triton's backend passes through.
const DEVICE_ALLOCATOR_FOR_INITIALIZERS: &str = "session.use_device_allocator_for_initializers";

/// The run configuration entry Triton's backend passes through.
const ARENA_SHRINKAGE: &str = "memory.enable_memory_arena_shrinkage";

/// A session over `model_file` with default options, to read its graph's inputs and
/// outputs while the configuration is still being completed (before a spec exists).
pub fn probe_session(
    environment: &ort::environment::Environment,
    model: &str,
    model_file: &Path,
) -> Result<Session> {
    let fail = load_error(model, model_file);
    Session::builder(environment)
        .map_err(|e| fail("session options", e.to_string()))?
        .commit_from_file(model_file)
        .map_err(|e| fail("ONNX Runtime could not create a session", e.to_string()))
}

/// The load error for `model`'s file, naming the step that failed.
fn load_error<'a>(model: &'a str, model_file: &'a Path) -> impl Fn(&str, String) -> Error + 'a {
    move |what, e| {
        Error::invalid_arg(format!(
            "failed to load model '{model}' from {}: {what}: {e}",
            model_file.display()
        ))
    }
}

/// Triton's mapping of `optimization.graph.level`: -1 basic, 1 extended, otherwise all.
fn optimization_level(spec: &ModelSpec) -> GraphOptimizationLevel {
    match spec.graph_optimization_level {
        -1 => GraphOptimizationLevel::Level1,
        1 => GraphOptimizationLevel::Level2,
        _ => GraphOptimizationLevel::All,
    }
}

/// A boolean model parameter as Triton's backends read one (`true`, `on`, `1`, `false`,
/// `off`, `0`, any case), with the text given; or Triton's error.
fn parameter_bool<'a>(spec: &'a ModelSpec, key: &str) -> Result<Option<(&'a str, bool)>> {
    let Some(value) = spec.parameters.get(key) else {
        return Ok(None);
    };
    match value.to_ascii_lowercase().as_str() {
        "true" | "on" | "1" => Ok(Some((value, true))),
        "false" | "off" | "0" => Ok(Some((value, false))),
        _ => Err(Error::invalid_arg(format!(
            "failed to convert '{value}' to boolean"
        ))),
    }
}

/// A non-negative integer model parameter, or a clear error naming it.
fn parameter_usize(spec: &ModelSpec, key: &str) -> Result<Option<usize>> {
    let Some(value) = spec.parameters.get(key) else {
        return Ok(None);
    };
    value.trim().parse::<usize>().map(Some).map_err(|_| {
        Error::invalid_arg(format!(
            "model '{}': parameter '{key}' must be a non-negative integer, got '{}'",
            spec.name, value
        ))
    })
}

#[cfg(test)]
mod tests {
    use nereid_core::config::{normalize_and_validate, parse_model_config, NormalizeOptions};

    use super::*;

    fn with_parameter(key: &str, value: &str) -> ModelSpec {
        let text = format!(
            r#"backend: "onnxruntime" max_batch_size: 0
               input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 1 ] }} ]
               output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
               parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}"#
        );
        let path = Path::new("config.pbtxt");
        let mut config = parse_model_config(path, &text).expect("parses");
        normalize_and_validate(&mut config, "m", NormalizeOptions::default()).expect("valid");
        ModelSpec::new(config, 1).expect("builds")
    }

    #[test]
    fn booleans_read_as_tritons_backends_read_them() {
        for (text, expected) in [("1", true), ("On", true), ("TRUE", true), ("off", false)] {
            let spec = with_parameter("enable_mem_arena", text);
            let read = parameter_bool(&spec, "enable_mem_arena").expect("a boolean");
            assert_eq!(read, Some((text, expected)));
        }
        let spec = with_parameter("enable_mem_arena", "yes");
        let e = parameter_bool(&spec, "enable_mem_arena").expect_err("not a boolean");
        assert_eq!(e.message(), "failed to convert 'yes' to boolean");
        assert_eq!(parameter_bool(&spec, "enable_mem_pattern").ok(), Some(None));
    }
}
