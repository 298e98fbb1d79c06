//! Checks an ensemble against its composing models once they are loaded, as Triton's
//! `ValidateEnsembleConfig` does: every step's model and version exist, each mapped name
//! is a real input or output of that model, every required input is fed, connected
//! tensors agree on datatype and shape, the ensemble's batch size fits every batching
//! step, and a cached ensemble contains nothing that cannot be cached.

use std::collections::HashMap;
use std::sync::Arc;

use nereid_proto::inference::{DataType, ModelConfig};

use super::graph::Plan;
use super::{StepModel, StepModels};
use crate::config::ensembling;
use crate::error::{Error, Result};
use crate::model::{format_dims, ModelSpec, SchedulingSpec, TensorSpec};

/// What an ensemble tensor is known to be, and which model said so.
struct TensorNode {
    model: String,
    data_type: i32,
    dims: Vec<i64>,
    /// `dims` with a leading -1 when the model batches.
    full_dims: Vec<i64>,
}

impl TensorNode {
    fn new(model: &str, batching: bool, data_type: i32, dims: &[i64]) -> Self {
        let mut full_dims = Vec::with_capacity(dims.len() + 1);
        if batching {
            full_dims.push(-1);
        }
        full_dims.extend_from_slice(dims);
        Self {
            model: model.to_string(),
            data_type,
            dims: dims.to_vec(),
            full_dims,
        }
    }
}

/// Resolves every step's model and checks the ensemble against them.
pub fn check_steps(config: &ModelConfig, plan: &Plan, models: &dyn StepModels) -> Result<()> {
    let ensemble = &config.name;
    let batching = config.max_batch_size > 0;
    let mut known: HashMap<String, TensorNode> = HashMap::new();
    for input in &config.input {
        let dims = input.reshape.as_ref().map_or(&input.dims, |r| &r.shape);
        let node = TensorNode::new(ensemble, batching, input.data_type, dims);
        known.insert(input.name.clone(), node);
    }
    for output in &config.output {
        let dims = output.reshape.as_ref().map_or(&output.dims, |r| &r.shape);
        let node = TensorNode::new(ensemble, batching, output.data_type, dims);
        known.entry(output.name.clone()).or_insert(node);
    }
    let steps = ensembling(config).map(|e| e.step.as_slice()).unwrap_or(&[]);
    for (step, planned) in steps.iter().zip(&plan.steps) {
        let model = step_model(ensemble, &planned.model, planned.version, models)?;
        let step_spec = model.spec();
        let step_max = i64::try_from(step_spec.max_batch_size).unwrap_or(i64::MAX);
        if step_max != 0 && step_max < i64::from(config.max_batch_size) {
            return Err(Error::invalid_arg(format!(
                "ensemble {ensemble} allows maximum batch size {}, but it contains model {} which only allows maximum batch size to be {step_max}",
                config.max_batch_size, planned.model
            )));
        }
        check_mapping(ensemble, step, step_spec, &mut known)?;
    }
    if config.response_cache.as_ref().is_some_and(|c| c.enable) {
        if let Some((model, why)) = uncacheable_step(plan, models) {
            return Err(Error::invalid_arg(format!(
                "Response Cache does not currently support ensemble {ensemble}: its composing model {model} {why}, and the ensemble inherits that limitation. Please disable the response cache."
            )));
        }
    }
    Ok(())
}

/// The loaded model a step names, or Triton's dependency error.
fn step_model(
    ensemble: &str,
    model: &str,
    version: Option<i64>,
    models: &dyn StepModels,
) -> Result<Arc<dyn StepModel>> {
    models
        .step_model(model, version)
        .map_err(|_| match version {
            Some(v) => Error::invalid_arg(format!(
            "ensemble '{ensemble}' depends on '{model}' whose required version {v} is not loaded."
        )),
            None => Error::invalid_arg(format!(
                "ensemble {ensemble} contains models that are not available or ambiguous: {model}"
            )),
        })
}

/// Triton's `ValidateTensorMapping` for one step.
fn check_mapping(
    ensemble: &str,
    step: &nereid_proto::inference::model_ensembling::Step,
    model: &ModelSpec,
    known: &mut HashMap<String, TensorNode>,
) -> Result<()> {
    let batching = model.max_batch_size > 0;
    let node = |t: &TensorSpec| {
        TensorNode::new(
            &model.name,
            batching,
            t.datatype.to_config() as i32,
            &t.dims,
        )
    };
    let mut input_map: Vec<(&String, &String)> = step.input_map.iter().collect();
    input_map.sort();
    for (input, tensor) in &input_map {
        if model.input(input).is_none() {
            return Err(Error::invalid_arg(format!(
                "in ensemble {ensemble}, ensemble tensor {tensor} is mapping to non-existing input {input} in model {}",
                step.model_name
            )));
        }
    }
    for input in &model.inputs {
        match step.input_map.get(&input.name) {
            Some(tensor) => connect(ensemble, tensor, node(input), known)?,
            None if input.optional => {}
            None => {
                return Err(Error::invalid_arg(format!(
                    "in ensemble {ensemble}, input {} in model {} is not mapped to any ensemble tensors",
                    input.name, model.name
                )))
            }
        }
    }
    let mut output_map: Vec<(&String, &String)> = step.output_map.iter().collect();
    output_map.sort();
    for (output, tensor) in output_map {
        let Some(spec) = model.output(output) else {
            return Err(Error::invalid_arg(format!(
                "in ensemble {ensemble}, ensemble tensor {tensor} is mapped from non-existing output {output} in model {}",
                step.model_name
            )));
        };
        connect(ensemble, tensor, node(spec), known)?;
    }
    Ok(())
}

/// Records what `tensor` is, or checks it against what an earlier model said.
fn connect(
    ensemble: &str,
    tensor: &str,
    node: TensorNode,
    known: &mut HashMap<String, TensorNode>,
) -> Result<()> {
    let Some(first) = known.get(tensor) else {
        known.insert(tensor.to_string(), node);
        return Ok(());
    };
    let prefix = format!("in ensemble {ensemble}, ensemble tensor {tensor}: ");
    if first.data_type != node.data_type {
        let name = |t: i32| DataType::try_from(t).map_or("TYPE_INVALID", |t| t.as_str_name());
        return Err(Error::invalid_arg(format!(
            "{prefix}inconsistent data type: {} is inferred from model {} while {} is inferred from model {}",
            name(first.data_type),
            first.model,
            name(node.data_type),
            node.model
        )));
    }
    // A non-batching model's [-1, d...] may meet a batching model's [d...].
    if !dims_match(&first.dims, &node.dims) && !dims_match(&first.full_dims, &node.full_dims) {
        return Err(Error::invalid_arg(format!(
            "{prefix}inconsistent shape: {} is inferred from model {} while {} is inferred from model {}",
            format_dims(&first.full_dims),
            first.model,
            format_dims(&node.full_dims),
            node.model
        )));
    }
    Ok(())
}

/// Equal rank and every dimension equal or variable (-1) on either side.
fn dims_match(a: &[i64], b: &[i64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| x == y || x == -1 || y == -1)
}

/// The first step (looking into nested ensembles) whose model cannot use the response
/// cache, with the reason.
fn uncacheable_step(plan: &Plan, models: &dyn StepModels) -> Option<(String, &'static str)> {
    for step in &plan.steps {
        let Ok(model) = models.step_model(&step.model, step.version) else {
            continue;
        };
        let spec = model.spec();
        if matches!(spec.scheduling, SchedulingSpec::Sequence(_)) {
            return Some((step.model.clone(), "uses the sequence batching scheduler"));
        }
        if spec.decoupled {
            return Some((step.model.clone(), "has a 'decoupled' transaction policy"));
        }
        if let Some(inner) = model.ensemble_plan() {
            if let Some(found) = uncacheable_step(inner, models) {
                return Some(found);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_compare_with_wildcards_and_print_like_triton() {
        assert!(dims_match(&[-1, 4], &[3, 4]));
        assert!(!dims_match(&[4], &[3]));
        assert!(!dims_match(&[4], &[4, 1]));
        assert_eq!(format_dims(&[-1, 3]), "[-1,3]");
        let mut known = HashMap::new();
        connect("e", "t", TensorNode::new("a", true, 11, &[4]), &mut known).expect("first");
        // A non-batching model may see the same tensor with its batch dimension spelled out.
        connect(
            "e",
            "t",
            TensorNode::new("b", false, 11, &[-1, 4]),
            &mut known,
        )
        .expect("same");
        let err =
            connect("e", "t", TensorNode::new("c", true, 11, &[3]), &mut known).expect_err("shape");
        assert_eq!(
            err.message(),
            "in ensemble e, ensemble tensor t: inconsistent shape: [-1,4] is inferred from model a while [-1,3] is inferred from model c"
        );
        let err =
            connect("e", "t", TensorNode::new("d", true, 8, &[4]), &mut known).expect_err("type");
        assert!(err
            .message()
            .contains("TYPE_FP32 is inferred from model a while TYPE_INT32"));
    }
}
