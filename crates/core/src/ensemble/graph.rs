//! The data-flow graph of an ensemble, built from its configuration alone: named ensemble
//! tensors connect step outputs to step inputs. Building the [`Plan`] checks what Triton
//! checks before it looks at any composing model (every step names a model and maps
//! tensors both ways, no tensor is written twice, every output is written, nothing is
//! left dangling, no step waits on a cycle), with Triton's messages.

use std::collections::{BTreeSet, HashMap};

use nereid_proto::inference::ModelConfig;

use crate::config::ensembling;
use crate::error::{Error, Result};

/// One step: a composing model and where its tensors come from and go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanStep {
    /// Composing model name.
    pub model: String,
    /// Composing model version; `None` for `-1` (the latest ready version).
    pub version: Option<i64>,
    /// `(model input name, ensemble tensor index)`, sorted by input name.
    pub inputs: Vec<(String, usize)>,
    /// `(model output name, ensemble tensor index)`, sorted by output name.
    pub outputs: Vec<(String, usize)>,
}

/// The validated graph: tensors by index, the steps, and who consumes each tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Ensemble tensor names; a tensor's index is its position here.
    pub tensors: Vec<String>,
    /// Tensor index of each ensemble input, in configuration order.
    pub inputs: Vec<usize>,
    /// Tensor index of each ensemble output, in configuration order.
    pub outputs: Vec<usize>,
    /// The steps in configuration order.
    pub steps: Vec<PlanStep>,
    /// For each tensor, the steps that read it (a step reading it twice is listed twice,
    /// so counting down one entry per arrival reaches zero exactly when a step is ready).
    pub consumers: Vec<Vec<usize>>,
}

/// The distinct composing model names of an ensemble configuration, sorted.
pub fn composing_models(config: &ModelConfig) -> Vec<String> {
    let names: BTreeSet<&str> = ensembling(config)
        .map(|e| e.step.iter().map(|s| s.model_name.as_str()).collect())
        .unwrap_or_default();
    names.into_iter().map(str::to_string).collect()
}

/// Tensor bookkeeping while the plan is built.
#[derive(Default)]
struct Tensors {
    names: Vec<String>,
    index: HashMap<String, usize>,
    /// The step that writes each tensor.
    producer: Vec<Option<usize>>,
}

impl Tensors {
    fn id(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        self.producer.push(None);
        self.index.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }
}

impl Plan {
    /// Builds and validates the graph of the ensemble `config` (already normalized).
    pub fn new(config: &ModelConfig) -> Result<Self> {
        let ensemble = &config.name;
        let Some(scheduling) = ensembling(config) else {
            return Err(Error::invalid_arg(format!(
                "ensemble scheduling must be set for ensemble {ensemble} whose platform is ensemble"
            )));
        };
        if scheduling.step.is_empty() {
            return Err(Error::invalid_arg(format!(
                "must specify 'step' for ensemble '{ensemble}'"
            )));
        }
        let mut tensors = Tensors::default();
        let mut steps = Vec::with_capacity(scheduling.step.len());
        for (index, step) in scheduling.step.iter().enumerate() {
            steps.push(plan_step(ensemble, index, step, &mut tensors)?);
        }
        let mut consumers = vec![Vec::new(); tensors.names.len()];
        for (index, step) in steps.iter().enumerate() {
            for &(_, tensor) in &step.inputs {
                consumers[tensor].push(index);
            }
        }
        let mut plan = Plan {
            tensors: tensors.names,
            inputs: Vec::new(),
            outputs: Vec::new(),
            steps,
            consumers,
        };
        // Triton's messages here really have a stray quote after the ensemble name.
        let tensor_of = |name: &str, what: &str| {
            tensors.index.get(name).copied().ok_or_else(|| {
                Error::invalid_arg(format!(
                    "ensemble {what} '{name}' for ensemble {ensemble}' is not used"
                ))
            })
        };
        for input in &config.input {
            plan.inputs.push(tensor_of(&input.name, "input")?);
        }
        let ready = plan.ready_tensors();
        for output in &config.output {
            let id = tensor_of(&output.name, "output")?;
            if !ready[id] {
                let blocked = plan.blocking_tensor(id, &ready, &tensors.producer);
                return Err(Error::invalid_arg(format!(
                    "output '{}' for ensemble '{ensemble}' is not written: at least one of its depending tensors, '{}', is not connected",
                    output.name, plan.tensors[blocked]
                )));
            }
            plan.outputs.push(id);
        }
        for (id, name) in plan.tensors.iter().enumerate() {
            let unused = !ready[id] || plan.consumers[id].is_empty();
            if unused && !plan.outputs.contains(&id) {
                return Err(Error::invalid_arg(format!(
                    "ensemble tensor '{name}' is unused in ensemble '{ensemble}'"
                )));
            }
        }
        Ok(plan)
    }

    /// Which tensors the data flow can ever fill, starting from the ensemble inputs.
    fn ready_tensors(&self) -> Vec<bool> {
        let mut ready = vec![false; self.tensors.len()];
        let mut waiting: Vec<usize> = self.steps.iter().map(|s| s.inputs.len()).collect();
        let mut queue: Vec<usize> = self.inputs.clone();
        for &id in &queue {
            ready[id] = true;
        }
        while let Some(id) = queue.pop() {
            for &step in &self.consumers[id] {
                waiting[step] -= 1;
                if waiting[step] == 0 {
                    for &(_, out) in &self.steps[step].outputs {
                        if !ready[out] {
                            ready[out] = true;
                            queue.push(out);
                        }
                    }
                }
            }
        }
        ready
    }

    /// A tensor that keeps `output` from being written: one that nothing writes, or the
    /// tensor at which the walk back from `output` closes a cycle.
    fn blocking_tensor(&self, output: usize, ready: &[bool], producer: &[Option<usize>]) -> usize {
        let mut visited = vec![false; self.tensors.len()];
        let mut current = output;
        loop {
            visited[current] = true;
            let Some(step) = producer[current] else {
                return current;
            };
            let next = self.steps[step]
                .inputs
                .iter()
                .map(|&(_, t)| t)
                .find(|&t| !ready[t]);
            match next {
                Some(t) if !visited[t] => current = t,
                // Every tensor reached here is unready, so its producer has an unready input.
                _ => return current,
            }
        }
    }
}

/// What one request needs of a plan when it asks for some of the ensemble's outputs
/// only: Triton prunes the steps whose outputs feed nothing asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needed {
    /// Per step: whether it runs.
    pub steps: Vec<bool>,
    /// Per ensemble output, in the plan's order: whether the request asked for it.
    pub outputs: Vec<bool>,
}

impl Plan {
    /// The steps and outputs a request asking for `wanted` needs; `None` when it needs
    /// them all (no selection, or every output selected).
    pub fn needed(&self, wanted: Option<&[String]>) -> Option<Needed> {
        let wanted = wanted?;
        let outputs: Vec<bool> = self
            .outputs
            .iter()
            .map(|&id| wanted.contains(&self.tensors[id]))
            .collect();
        if outputs.iter().all(|&w| w) {
            return None;
        }
        let mut tensors = vec![false; self.tensors.len()];
        for (&id, &w) in self.outputs.iter().zip(&outputs) {
            tensors[id] |= w;
        }
        // Backwards from the outputs asked for: a step runs when something needed reads
        // one of its outputs; then its inputs are needed too. Each pass adds a step or ends.
        let mut steps = vec![false; self.steps.len()];
        loop {
            let mut grew = false;
            for (index, step) in self.steps.iter().enumerate() {
                if steps[index] || !step.outputs.iter().any(|&(_, t)| tensors[t]) {
                    continue;
                }
                steps[index] = true;
                grew = true;
                for &(_, t) in &step.inputs {
                    tensors[t] = true;
                }
            }
            if !grew {
                return Some(Needed { steps, outputs });
            }
        }
    }
}

/// Validates one step's fields and maps and records its tensors.
fn plan_step(
    ensemble: &str,
    index: usize,
    step: &nereid_proto::inference::model_ensembling::Step,
    tensors: &mut Tensors,
) -> Result<PlanStep> {
    for (field, empty) in [
        ("model_name", step.model_name.is_empty()),
        ("input_map", step.input_map.is_empty()),
        ("output_map", step.output_map.is_empty()),
    ] {
        if empty {
            return Err(Error::invalid_arg(format!(
                "must specify '{field}' in step {index} of ensemble '{ensemble}'"
            )));
        }
    }
    // The maps are protobuf maps (unordered); sort for a deterministic plan.
    let mut outputs: Vec<(&String, &String)> = step.output_map.iter().collect();
    outputs.sort();
    let mut planned_outputs = Vec::with_capacity(outputs.len());
    for (model_output, tensor) in outputs {
        let id = tensors.id(tensor);
        if tensors.producer[id].is_some() {
            return Err(Error::invalid_arg(format!(
                "ensemble tensor '{tensor}' can appear in an output map only once for ensemble '{ensemble}' step {index}"
            )));
        }
        tensors.producer[id] = Some(index);
        planned_outputs.push((model_output.clone(), id));
    }
    let mut inputs: Vec<(&String, &String)> = step.input_map.iter().collect();
    inputs.sort();
    let planned_inputs = inputs
        .into_iter()
        .map(|(model_input, tensor)| (model_input.clone(), tensors.id(tensor)))
        .collect();
    Ok(PlanStep {
        model: step.model_name.clone(),
        version: (step.model_version >= 0).then_some(step.model_version),
        inputs: planned_inputs,
        outputs: planned_outputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_model_config;
    use std::path::Path;

    const IO: &str = r#"name: "e" platform: "ensemble" max_batch_size: 8
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]"#;

    fn step(model: &str, inputs: &[(&str, &str)], outputs: &[(&str, &str)]) -> String {
        let map = |kind: &str, pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| format!(r#"{kind} {{ key: "{k}" value: "{v}" }} "#))
                .collect::<String>()
        };
        format!(
            r#"{{ model_name: "{model}" model_version: -1 {}{} }}"#,
            map("input_map", inputs),
            map("output_map", outputs)
        )
    }

    fn plan(steps: &[String]) -> Result<Plan> {
        let text = format!(
            "{IO} ensemble_scheduling {{ step [ {} ] }}",
            steps.join(", ")
        );
        Plan::new(&parse_model_config(Path::new("config.pbtxt"), &text).expect("parses"))
    }

    fn message(steps: &[String]) -> String {
        plan(steps).expect_err("invalid").message().to_string()
    }

    #[test]
    fn a_request_for_some_outputs_needs_only_the_steps_feeding_them() {
        let text = format!(
            r#"name: "e" platform: "ensemble" max_batch_size: 8
            input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
            output [ {{ name: "OUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
                     {{ name: "OUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
            ensemble_scheduling {{ step [ {}, {}, {} ] }}"#,
            step("a", &[("X", "IN")], &[("Y", "mid")]),
            step("b", &[("X", "mid")], &[("Y", "OUT0")]),
            step("c", &[("X", "IN")], &[("Y", "OUT1")]),
        );
        let p = Plan::new(&parse_model_config(Path::new("config.pbtxt"), &text).expect("parses"))
            .expect("valid");
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(p.needed(None), None, "no selection needs everything");
        assert_eq!(p.needed(Some(&names(&["OUT1", "OUT0"]))), None);
        let only_out0 = Needed {
            steps: vec![true, true, false],
            outputs: vec![true, false],
        };
        assert_eq!(p.needed(Some(&names(&["OUT0"]))), Some(only_out0));
        let only_out1 = Needed {
            steps: vec![false, false, true],
            outputs: vec![false, true],
        };
        assert_eq!(p.needed(Some(&names(&["OUT1"]))), Some(only_out1));
    }

    #[test]
    fn diamond_plan_links_consumers() {
        let p = plan(&[
            step("a", &[("X", "IN")], &[("Y", "left"), ("Z", "right")]),
            step("b", &[("X", "left")], &[("Y", "l2")]),
            step("b", &[("X", "right")], &[("Y", "r2")]),
            step("c", &[("P", "l2"), ("Q", "r2")], &[("Y", "OUT")]),
        ])
        .expect("valid");
        assert_eq!(p.steps.len(), 4);
        assert_eq!(p.inputs.len(), 1);
        assert_eq!(p.consumers[p.inputs[0]], vec![0]);
        let l2 = p.tensors.iter().position(|t| t == "l2").expect("known");
        assert_eq!(p.consumers[l2], vec![3]);
        assert_eq!(p.tensors[p.outputs[0]], "OUT");
    }

    #[test]
    fn rejects_dangling_and_cyclic_graphs_with_tritons_messages() {
        let m = message(&[step("a", &[("X", "IN"), ("Y", "ghost")], &[("Z", "OUT")])]);
        assert_eq!(m, "output 'OUT' for ensemble 'e' is not written: at least one of its depending tensors, 'ghost', is not connected");
        let m = message(&[
            step("a", &[("X", "IN"), ("Y", "loop_b")], &[("Z", "loop_a")]),
            step("a", &[("X", "loop_a")], &[("Z", "loop_b"), ("W", "OUT")]),
        ]);
        assert!(
            m.starts_with("output 'OUT' for ensemble 'e' is not written"),
            "{m}"
        );
        let m = message(&[step("a", &[("X", "IN")], &[("Z", "other")])]);
        assert_eq!(m, "ensemble output 'OUT' for ensemble e' is not used");
        let m = message(&[step("a", &[("X", "x")], &[("Z", "OUT")])]);
        assert_eq!(m, "ensemble input 'IN' for ensemble e' is not used");
        let m = message(&[step("a", &[("X", "IN")], &[("Z", "OUT"), ("W", "spare")])]);
        assert_eq!(m, "ensemble tensor 'spare' is unused in ensemble 'e'");
        let m = message(&[
            step("a", &[("X", "IN")], &[("Z", "OUT")]),
            step("a", &[("X", "IN")], &[("Z", "OUT")]),
        ]);
        assert_eq!(
            m,
            "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'e' step 1"
        );
        let m = message(&[step("a", &[], &[("Z", "OUT")])]);
        assert_eq!(m, "must specify 'input_map' in step 0 of ensemble 'e'");
        assert_eq!(
            message(&[]),
            "must specify 'step' for ensemble 'e'",
            "an empty step list"
        );
    }
}
