//! The sequence batcher's tensors against the graph: each control input must be a graph
//! input of shape [1] (after the batch dimension) and of the control's type, as Triton's
//! `ValidateBooleanSequenceControl` / `ValidateTypedSequenceControl` require; each
//! implicit state must be a graph input and a graph output of its datatype.
//!
//! Triton's backend means to check a state's output (`ValidateOutputs` ends with it,
//! with the words "for output state"), but that code reads a `name` field that state
//! entries do not have and in practice never runs; a mismatched state then fails every
//! request. Here the state is checked with those words, and its input likewise.

use nereid_core::model::{format_dims, ControlSpec, ModelSpec, StateSpec};
use nereid_core::{DataType, Error, Result};

use super::{check_datatype, Graph, ModelTensor, Side};
use crate::convert::onnx_name;

/// Checks START, END, READY and CORRID, in that order, against the graph's `inputs`.
pub(super) fn check_controls(
    spec: &ModelSpec,
    controls: &ControlSpec,
    inputs: &[ModelTensor],
) -> Result<()> {
    let switches = [&controls.start, &controls.end, &controls.ready];
    let named = switches
        .into_iter()
        .flatten()
        .map(|s| (s.name.as_str(), s.datatype))
        .chain(
            controls
                .corrid
                .iter()
                .map(|c| (c.name.as_str(), c.datatype)),
        );
    for (name, datatype) in named {
        check_control(spec, name, datatype, inputs)?;
    }
    Ok(())
}

fn check_control(
    spec: &ModelSpec,
    name: &str,
    datatype: DataType,
    inputs: &[ModelTensor],
) -> Result<()> {
    let model = &spec.name;
    let Some(found) = inputs.iter().find(|t| t.name == name) else {
        return Err(Error::internal(format!(
            "configuration specified sequence control '{name}', but model does not provide that input"
        )));
    };
    let debatched = &found.dims[usize::from(spec.max_batch_size > 0).min(found.dims.len())..];
    if debatched != [1] {
        return Err(Error::invalid_arg(format!(
            "unable to load model '{model}', sequence control '{name}' in model has dims {} but dims [1] is expected",
            format_dims(debatched)
        )));
    }
    if found.datatype != datatype {
        return Err(Error::invalid_arg(format!(
            "unable to load model '{model}', sequence control '{name}', the model expects data-type {} but the model configuration specifies data-type {}",
            onnx_name(found.datatype),
            datatype.to_config().as_str_name()
        )));
    }
    Ok(())
}

/// Checks each state's output, then its input: present in the graph, of its datatype.
pub(super) fn check_states(spec: &ModelSpec, states: &[StateSpec], graph: &Graph) -> Result<()> {
    for state in states {
        let output = graph.find(Side::Output, &state.output_name)?;
        check_datatype(
            spec,
            "output state",
            &state.output_name,
            state.datatype,
            output,
        )?;
        let input = graph.find(Side::Input, &state.input_name)?;
        check_datatype(
            spec,
            "input state",
            &state.input_name,
            state.datatype,
            input,
        )?;
    }
    Ok(())
}
