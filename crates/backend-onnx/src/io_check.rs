//! The configuration's inputs and outputs checked against the ONNX graph when an instance
//! loads, as Triton's ONNX Runtime backend does: a configured tensor the graph lacks, or
//! one with another datatype, fails the load with Triton's message. Without this, a
//! mistaken `config.pbtxt` or load-API override loads and then fails every request.

use nereid_core::model::{ModelSpec, TensorSpec};
use nereid_core::{Error, Result};
use ort::session::Session;

use crate::autocomplete::{tensors, ModelTensor};

/// Fails when a configured input or output is not in `session`'s graph or has another
/// datatype there.
pub fn check_io(spec: &ModelSpec, session: &Session) -> Result<()> {
    let inputs = tensors(&spec.name, session.inputs())?;
    let outputs = tensors(&spec.name, session.outputs())?;
    check(spec, "input", &spec.inputs, &inputs)?;
    check(spec, "output", &spec.outputs, &outputs)
}

fn check(
    spec: &ModelSpec,
    kind: &str,
    configured: &[TensorSpec],
    graph: &[ModelTensor],
) -> Result<()> {
    for tensor in configured {
        let Some(found) = graph.iter().find(|t| t.name == tensor.name) else {
            let allowed: Vec<&str> = graph.iter().map(|t| t.name.as_str()).collect();
            return Err(Error::invalid_arg(format!(
                "unexpected inference {kind} '{}', allowed {kind}s are: {}",
                tensor.name,
                allowed.join(", ")
            )));
        };
        if found.datatype != tensor.datatype {
            return Err(Error::invalid_arg(format!(
                "unable to load model '{}', configuration expects datatype {} for {kind} '{}', model provides {}",
                spec.name,
                tensor.datatype.to_config().as_str_name(),
                tensor.name,
                found.datatype.to_config().as_str_name()
            )));
        }
    }
    Ok(())
}
