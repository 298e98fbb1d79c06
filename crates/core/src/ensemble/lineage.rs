//! Which decoupled step each ensemble tensor descends from (Triton's "decouple labels",
//! `ValidateEnsembleConfig`): a step must not combine tensors from different decoupled
//! steps, or from one and the request itself, since their responses cannot be paired;
//! an ensemble with a decoupled step is decoupled itself.

use super::graph::Plan;
use super::StepModels;
use crate::error::{Error, Result};

/// Whether a step of `plan` (checked against the loaded `models`) is decoupled; fails,
/// with Triton's words, when a step receives tensors of different lineages.
pub fn has_decoupled_step(ensemble: &str, plan: &Plan, models: &dyn StepModels) -> Result<bool> {
    // The lineage of each tensor: 0 for the request's, n for the n-th decoupled step's.
    let mut lineage: Vec<Option<usize>> = vec![None; plan.tensors.len()];
    for &id in &plan.inputs {
        lineage[id] = Some(0);
    }
    let mut decoupled_steps = 0;
    let mut pending: Vec<usize> = (0..plan.steps.len()).collect();
    // Each pass labels at least one step of a valid (acyclic) plan.
    while !pending.is_empty() {
        let before = pending.len();
        let mut still = Vec::with_capacity(pending.len());
        for index in pending {
            let step = &plan.steps[index];
            let inputs: Option<Vec<usize>> =
                step.inputs.iter().map(|(_, id)| lineage[*id]).collect();
            let Some(inputs) = inputs else {
                still.push(index);
                continue;
            };
            let first = inputs.first().copied().unwrap_or(0);
            if inputs.iter().any(|&l| l != first) {
                return Err(Error::invalid_arg(format!(
                    "in ensemble {ensemble}, step of model '{}' receives inputs originated from different decoupled models",
                    step.model
                )));
            }
            let decoupled = models
                .step_model(&step.model, step.version)
                .is_ok_and(|m| m.spec().decoupled);
            let out = if decoupled {
                decoupled_steps += 1;
                decoupled_steps
            } else {
                first
            };
            for (_, id) in &step.outputs {
                lineage[*id] = Some(out);
            }
        }
        if still.len() == before {
            break;
        }
        pending = still;
    }
    // The ensemble's outputs meet as the inputs of one last node, the ensemble itself
    // (Triton's sink node): they too must share a lineage.
    let outputs: Vec<usize> = plan.outputs.iter().filter_map(|&id| lineage[id]).collect();
    if outputs.iter().any(|&l| Some(&l) != outputs.first()) {
        return Err(Error::invalid_arg(format!(
            "in ensemble {ensemble}, step of model '{ensemble}' receives inputs originated from different decoupled models"
        )));
    }
    Ok(decoupled_steps > 0)
}
