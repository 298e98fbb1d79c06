//! Creating an ORT session with the options Triton's ONNX Runtime backend reads from the
//! model configuration: `parameters` `intra_op_thread_count`, `inter_op_thread_count`,
//! `execution_mode`, and `optimization { graph { level } }`.

use std::path::Path;

use ort::ep::ExecutionProviderDispatch;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;

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
    if !providers.is_empty() {
        builder = builder
            .with_execution_providers(providers)
            .map_err(|e| fail("execution provider", e.to_string()))?;
    }
    builder = builder
        .with_optimization_level(optimization_level(spec))
        .map_err(|e| fail("graph optimization level", e.to_string()))?;
    builder
        .commit_from_file(model_file)
        .map_err(|e| fail("ONNX Runtime could not create a session", e.to_string()))
}

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
