//! Creating an ORT session with the options Triton's ONNX Runtime backend reads from the
//! model configuration: `parameters` `intra_op_thread_count`, `inter_op_thread_count`,
//! `execution_mode`, and `optimization { graph { level } }`.

use std::path::Path;

use ort::ep::ExecutionProviderDispatch;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;

use nereid_core::config::ModelConfig;
use nereid_core::{Error, Result};

/// Builds a session for `model_file` configured from `config`, on the CPU.
pub fn build_session(
    environment: &ort::environment::Environment,
    config: &ModelConfig,
    model_file: &Path,
) -> Result<Session> {
    build_session_on(environment, config, model_file, &[])
}

/// Builds a session for `model_file` configured from `config`, registering `providers`
/// (each must succeed) ahead of the CPU.
pub fn build_session_on(
    environment: &ort::environment::Environment,
    config: &ModelConfig,
    model_file: &Path,
    providers: &[ExecutionProviderDispatch],
) -> Result<Session> {
    let fail = |what: &str, e: String| {
        Error::invalid_arg(format!(
            "failed to load model '{}' from {}: {what}: {e}",
            config.name,
            model_file.display()
        ))
    };
    let mut builder =
        Session::builder(environment).map_err(|e| fail("session options", e.to_string()))?;
    if let Some(n) = parameter_usize(config, "intra_op_thread_count")? {
        builder = builder
            .with_intra_threads(n)
            .map_err(|e| fail("intra_op_thread_count", e.to_string()))?;
    }
    if let Some(n) = parameter_usize(config, "inter_op_thread_count")? {
        builder = builder
            .with_inter_threads(n)
            .map_err(|e| fail("inter_op_thread_count", e.to_string()))?;
    }
    if let Some(mode) = parameter_usize(config, "execution_mode")? {
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
        .with_optimization_level(optimization_level(config))
        .map_err(|e| fail("graph optimization level", e.to_string()))?;
    builder
        .commit_from_file(model_file)
        .map_err(|e| fail("ONNX Runtime could not create a session", e.to_string()))
}

/// Triton's mapping of `optimization.graph.level`: -1 basic, 1 extended, otherwise all.
fn optimization_level(config: &ModelConfig) -> GraphOptimizationLevel {
    let level = config
        .optimization
        .as_ref()
        .and_then(|o| o.graph.as_ref())
        .map_or(0, |g| g.level);
    match level {
        -1 => GraphOptimizationLevel::Level1,
        1 => GraphOptimizationLevel::Level2,
        _ => GraphOptimizationLevel::All,
    }
}

/// A non-negative integer model parameter, or a clear error naming it.
fn parameter_usize(config: &ModelConfig, key: &str) -> Result<Option<usize>> {
    let Some(p) = config.parameters.get(key) else {
        return Ok(None);
    };
    p.string_value
        .trim()
        .parse::<usize>()
        .map(Some)
        .map_err(|_| {
            Error::invalid_arg(format!(
                "model '{}': parameter '{key}' must be a non-negative integer, got '{}'",
                config.name, p.string_value
            ))
        })
}
