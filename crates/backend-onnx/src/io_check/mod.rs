//! The configuration checked against the ONNX graph when an instance loads, as Triton's
//! ONNX Runtime backend does (`ValidateInputs`, `ValidateOutputs` and the sequence
//! control checks in its `src/onnxruntime.cc`), in the same order and with the same
//! messages: the sequence controls, the number of inputs (`batch_input`s count), each
//! configured input and output (name, datatype, shape; a `batch_output`'s shape is not
//! compared), then the implicit state tensors. Without this, a
//! mistaken `config.pbtxt` or load-API override loads and then fails every request.

mod sequence;
mod shape;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use nereid_core::model::{ModelSpec, TensorSpec};
use nereid_core::{DataType, Error, Result};
use ort::session::Session;

use crate::autocomplete::{tensor, tensors, ModelTensor};

/// Fails when `spec` contradicts `session`'s graph.
pub fn check_io(spec: &ModelSpec, session: &Session) -> Result<()> {
    let initializers = session
        .overridable_initializers()
        .iter()
        .map(|i| tensor(&spec.name, i.name(), i.dtype()))
        .collect::<Result<_>>()?;
    let graph = Graph {
        inputs: tensors(&spec.name, session.inputs())?,
        initializers,
        outputs: tensors(&spec.name, session.outputs())?,
    };
    check_graph(spec, &graph)
}

/// The tensors of an ONNX graph, as the checks need them.
struct Graph {
    /// The inputs a run must be given.
    inputs: Vec<ModelTensor>,
    /// Initializers a run may replace: configurable as (optional) inputs too, but not
    /// counted among the inputs the configuration must list.
    initializers: Vec<ModelTensor>,
    /// The outputs.
    outputs: Vec<ModelTensor>,
}

/// Which side of the graph a tensor is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Input,
    Output,
}

impl Side {
    fn word(self) -> &'static str {
        match self {
            Side::Input => "input",
            Side::Output => "output",
        }
    }
}

impl Graph {
    /// The tensors a configuration may name on `side`.
    fn side(&self, side: Side) -> impl Iterator<Item = &ModelTensor> {
        let (first, extra): (&[ModelTensor], &[ModelTensor]) = match side {
            Side::Input => (&self.inputs, &self.initializers),
            Side::Output => (&self.outputs, &[]),
        };
        first.iter().chain(extra)
    }

    /// The tensor `name` on `side`, or Triton's `CheckAllowedModelInput` /
    /// `CheckAllowedModelOutput` error listing the allowed names in sorted order.
    fn find(&self, side: Side, name: &str) -> Result<&ModelTensor> {
        if let Some(found) = self.side(side).find(|t| t.name == name) {
            return Ok(found);
        }
        let allowed: BTreeSet<&str> = self.side(side).map(|t| t.name.as_str()).collect();
        let word = side.word();
        Err(Error::invalid_arg(format!(
            "unexpected inference {word} '{name}', allowed {word}s are: {}",
            allowed.into_iter().collect::<Vec<_>>().join(", ")
        )))
    }
}

/// Every check, in Triton's order.
fn check_graph(spec: &ModelSpec, graph: &Graph) -> Result<()> {
    let sequence = spec.scheduling.sequence();
    if let Some(sequence) = sequence {
        sequence::check_controls(spec, &sequence.controls, &graph.inputs)?;
    }
    let expected = spec.inputs.iter().filter(|t| !t.optional).count()
        + spec.batch_inputs.len()
        + sequence.map_or(0, |s| s.controls.tensor_specs().len() + s.states.len());
    if graph.inputs.len() != expected {
        return Err(Error::invalid_arg(format!(
            "unable to load model '{}', configuration expects {expected} inputs, model provides {}",
            spec.name,
            graph.inputs.len()
        )));
    }
    for input in &spec.inputs {
        check_input(spec, graph, input)?;
    }
    for output in &spec.outputs {
        let found = graph.find(Side::Output, &output.name)?;
        check_datatype(spec, "output", &output.name, output.datatype, found)?;
        // A batch output holds every request's part end to end, whatever its dims say.
        if spec.batch_output(&output.name).is_none() {
            shape::check_shape(spec, Side::Output, output, &found.dims)?;
        }
    }
    if let Some(sequence) = sequence {
        sequence::check_states(spec, &sequence.states, graph)?;
    }
    Ok(())
}

/// One configured input: optional ones only without batching and never ragged, then
/// its name, datatype and shape.
fn check_input(spec: &ModelSpec, graph: &Graph, input: &TensorSpec) -> Result<()> {
    let (model, name) = (&spec.name, &input.name);
    if input.optional && spec.max_batch_size > 0 {
        return Err(Error::invalid_arg(format!(
            "unable to load model '{model}', optional input '{name}' is not supported for models that support batching"
        )));
    }
    let found = graph.find(Side::Input, name)?;
    check_datatype(spec, "input", name, input.datatype, found)?;
    if input.optional && input.allow_ragged_batch {
        return Err(Error::invalid_arg(format!(
            "unable to load model '{model}', configuration expects model provides input with shape [-1] for ragged input '{name}', which is not supported for optional input"
        )));
    }
    shape::check_shape(spec, Side::Input, input, &found.dims)
}

/// Fails when the graph's `found` tensor is not of the configured `datatype`; `what`
/// is Triton's word for the tensor ("input", "output state", ...).
fn check_datatype(
    spec: &ModelSpec,
    what: &str,
    name: &str,
    datatype: DataType,
    found: &ModelTensor,
) -> Result<()> {
    if found.datatype == datatype {
        return Ok(());
    }
    Err(Error::invalid_arg(format!(
        "unable to load model '{}', configuration expects datatype {} for {what} '{name}', model provides TYPE_{}",
        spec.name,
        datatype.to_config().as_str_name(),
        found.datatype.as_str()
    )))
}
