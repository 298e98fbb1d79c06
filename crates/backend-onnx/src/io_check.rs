//! The configuration's inputs and outputs checked against the ONNX graph when an instance
//! loads, as Triton's ONNX Runtime backend does (`ValidateInputs` / `ValidateOutputs` in
//! `src/onnxruntime.cc`): a configured tensor the graph lacks, one with another
//! datatype, or one whose shape the graph does not have fails the load with Triton's
//! message. The shape compared is the tensor's `reshape` when it has one (what the model
//! sees), else its `dims`, after a -1 batch dimension when the model batches. Without
//! this, a mistaken `config.pbtxt` or load-API override loads and then fails every
//! request.

use nereid_core::model::{ModelSpec, TensorSpec};
use nereid_core::{Error, Result};
use ort::session::Session;

use crate::autocomplete::{tensors, ModelTensor};

/// Fails when a configured input or output is not in `session`'s graph, has another
/// datatype there, or another shape.
pub fn check_io(spec: &ModelSpec, session: &Session) -> Result<()> {
    let inputs = tensors(&spec.name, session.inputs())?;
    let outputs = tensors(&spec.name, session.outputs())?;
    check(spec, Kind::Input, &spec.inputs, &inputs)?;
    check(spec, Kind::Output, &spec.outputs, &outputs)
}

/// Which side of the graph a tensor is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Input,
    Output,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Input => "input",
            Kind::Output => "output",
        }
    }
}

fn check(
    spec: &ModelSpec,
    kind: Kind,
    configured: &[TensorSpec],
    graph: &[ModelTensor],
) -> Result<()> {
    let word = kind.word();
    for tensor in configured {
        let Some(found) = graph.iter().find(|t| t.name == tensor.name) else {
            let allowed: Vec<&str> = graph.iter().map(|t| t.name.as_str()).collect();
            return Err(Error::invalid_arg(format!(
                "unexpected inference {word} '{}', allowed {word}s are: {}",
                tensor.name,
                allowed.join(", ")
            )));
        };
        if found.datatype != tensor.datatype {
            return Err(Error::invalid_arg(format!(
                "unable to load model '{}', configuration expects datatype {} for {word} '{}', model provides {}",
                spec.name,
                tensor.datatype.to_config().as_str_name(),
                tensor.name,
                found.datatype.to_config().as_str_name()
            )));
        }
        check_shape(spec, kind, tensor, &found.dims)?;
    }
    Ok(())
}

/// Triton's shape rules for one tensor whose graph shape is `model_shape`: a ragged
/// input must be `[-1]` in the graph; a scalar in the graph takes only 1s in the
/// configuration; any other shape goes through [`compare_dims`], exactly for outputs
/// and with the graph's variable dimensions accepting anything for inputs.
fn check_shape(
    spec: &ModelSpec,
    kind: Kind,
    tensor: &TensorSpec,
    model_shape: &[i64],
) -> Result<()> {
    let model = &spec.name;
    let name = &tensor.name;
    if kind == Kind::Input && tensor.allow_ragged_batch {
        if model_shape != [-1] {
            return Err(Error::invalid_arg(format!(
                "unable to load model '{model}', configuration expects model provides input with shape [-1]  for ragged input '{name}', model provides {}",
                shape_text(model_shape)
            )));
        }
        return Ok(());
    }
    let dims = tensor.reshape.as_deref().unwrap_or(&tensor.dims);
    if model_shape.is_empty() {
        if dims.iter().any(|&d| d != 1) {
            return Err(Error::invalid_arg(format!(
                "unable to load model '{model}', scalar tensor '{name}', should only provide 1 in the model configuration when the model doesn't support batching. Model configuration provided: {}.",
                shape_text(dims)
            )));
        }
        return Ok(());
    }
    compare_dims(
        model,
        name,
        model_shape,
        dims,
        spec.max_batch_size > 0,
        kind == Kind::Output,
    )
}

/// Triton's `CompareDimsSupported` (onnxruntime_backend `src/onnxruntime_utils.cc`):
/// the graph's shape against the configured one (with a -1 batch dimension in front when
/// the model batches, which the graph must then have too). A -1 in the graph matches any
/// configured dimension unless `exact`.
fn compare_dims(
    model: &str,
    name: &str,
    model_shape: &[i64],
    dims: &[i64],
    batching: bool,
    exact: bool,
) -> Result<()> {
    let agree = |full: &[i64]| {
        model_shape.len() == full.len()
            && model_shape
                .iter()
                .zip(full)
                .all(|(&m, &c)| (!exact && m == -1) || m == c)
    };
    if !batching {
        if agree(dims) {
            return Ok(());
        }
        return Err(Error::invalid_arg(format!(
            "model '{model}', tensor '{name}': the model expects {} dimensions (shape {}) but the model configuration specifies {} dimensions (shape {})",
            model_shape.len(),
            shape_text(model_shape),
            dims.len(),
            shape_text(dims)
        )));
    }
    if model_shape.first() != Some(&-1) {
        return Err(Error::invalid_arg(format!(
            "model '{model}', tensor '{name}': for the model to support batching the shape should have at least 1 dimension and the first dimension must be -1; but shape expected by the model is {}",
            shape_text(model_shape)
        )));
    }
    let full: Vec<i64> = std::iter::once(-1).chain(dims.iter().copied()).collect();
    if agree(&full) {
        return Ok(());
    }
    Err(Error::invalid_arg(format!(
        "model '{model}', tensor '{name}': the model expects {} dimensions (shape {}) but the model configuration specifies {} dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, making complete shape {})",
        model_shape.len(),
        shape_text(model_shape),
        full.len(),
        shape_text(&full)
    )))
}

/// Triton's `ShapeToString`: `[-1,3,224,224]`.
fn shape_text(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nereid_core::config::{normalize_and_validate, parse_model_config, NormalizeOptions};

    /// Model `m` with one FP32 input and one output, each given by the fields after its
    /// name and type.
    fn spec(max_batch_size: u32, input: &str, output: &str) -> ModelSpec {
        let text = format!(
            r#"backend: "identity" max_batch_size: {max_batch_size}
               input [ {{ name: "x" data_type: TYPE_FP32 {input} }} ]
               output [ {{ name: "y" data_type: TYPE_FP32 {output} }} ]"#
        );
        let path = std::path::Path::new("config.pbtxt");
        let mut config = parse_model_config(path, &text).expect("parses");
        normalize_and_validate(&mut config, "m", NormalizeOptions::default()).expect("valid");
        ModelSpec::new(config, 1).expect("builds")
    }

    fn graph(name: &str, dims: &[i64]) -> Vec<ModelTensor> {
        vec![ModelTensor {
            name: name.into(),
            datatype: nereid_core::DataType::Fp32,
            dims: dims.to_vec(),
        }]
    }

    /// The load error for `spec` over a graph with input `x` of `input_shape` and output
    /// `y` of `output_shape`.
    fn error(spec: &ModelSpec, input_shape: &[i64], output_shape: &[i64]) -> Option<String> {
        check(spec, Kind::Input, &spec.inputs, &graph("x", input_shape))
            .and_then(|()| check(spec, Kind::Output, &spec.outputs, &graph("y", output_shape)))
            .err()
            .map(|e| e.message().to_string())
    }

    #[test]
    fn the_graph_is_compared_with_the_reshape_when_there_is_one() {
        // Triton's densenet_onnx configuration.
        let densenet = spec(
            0,
            "dims: [ 3, 224, 224 ] reshape { shape: [ 1, 3, 224, 224 ] }",
            "dims: [ 1000 ] reshape { shape: [ 1, 1000, 1, 1 ] }",
        );
        assert_eq!(error(&densenet, &[1, 3, 224, 224], &[1, 1000, 1, 1]), None);
        // A variable graph dimension takes any configured one for inputs.
        assert_eq!(error(&densenet, &[-1, 3, -1, -1], &[1, 1000, 1, 1]), None);
        assert_eq!(
            error(&densenet, &[3, 224, 224], &[1, 1000, 1, 1]),
            Some("model 'm', tensor 'x': the model expects 3 dimensions (shape [3,224,224]) but the model configuration specifies 4 dimensions (shape [1,3,224,224])".into())
        );
        // Outputs compare exactly: a variable graph dimension needs -1 in the config.
        assert_eq!(
            error(&densenet, &[1, 3, 224, 224], &[-1, 1000, 1, 1]),
            Some("model 'm', tensor 'y': the model expects 4 dimensions (shape [-1,1000,1,1]) but the model configuration specifies 4 dimensions (shape [1,1000,1,1])".into())
        );
        // Without reshape, the dims are compared (and this graph has another rank).
        let plain = spec(0, "dims: [ 3, 224, 224 ]", "dims: [ 1000 ]");
        assert_eq!(error(&plain, &[3, 224, 224], &[1000]), None);
        assert!(error(&plain, &[1, 3, 224, 224], &[1000])
            .is_some_and(|e| e.contains("specifies 3 dimensions (shape [3,224,224])")));
    }

    #[test]
    fn batching_models_need_a_variable_first_dimension() {
        let batching = spec(
            8,
            "dims: [ 3, 4, 4 ] reshape { shape: [ 48 ] }",
            "dims: [ 10 ] reshape { shape: [ 10, 1, 1 ] }",
        );
        assert_eq!(error(&batching, &[-1, 48], &[-1, 10, 1, 1]), None);
        assert_eq!(
            error(&batching, &[-1, 3, 4, 4], &[-1, 10, 1, 1]),
            Some("model 'm', tensor 'x': the model expects 4 dimensions (shape [-1,3,4,4]) but the model configuration specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, making complete shape [-1,48])".into())
        );
        assert_eq!(
            error(&batching, &[1, 48], &[-1, 10, 1, 1]),
            Some("model 'm', tensor 'x': for the model to support batching the shape should have at least 1 dimension and the first dimension must be -1; but shape expected by the model is [1,48]".into())
        );
        // An empty reshape: a scalar per batch row, [-1] in the graph.
        let scalar = spec(4, "dims: [ 1 ] reshape { shape: [ ] }", "dims: [ 1 ]");
        assert_eq!(error(&scalar, &[-1], &[-1, 1]), None);
    }

    #[test]
    fn scalar_and_ragged_tensors_follow_tritons_rules() {
        let ones = spec(0, "dims: [ 1 ]", "dims: [ 1, 1 ]");
        assert_eq!(error(&ones, &[], &[]), None);
        let two = spec(0, "dims: [ 2 ]", "dims: [ 1 ]");
        assert_eq!(
            error(&two, &[], &[]),
            Some("unable to load model 'm', scalar tensor 'x', should only provide 1 in the model configuration when the model doesn't support batching. Model configuration provided: [2].".into())
        );
        let ragged = spec(8, "dims: [ -1 ] allow_ragged_batch: true", "dims: [ -1 ]");
        assert_eq!(error(&ragged, &[-1], &[-1, -1]), None);
        assert_eq!(
            error(&ragged, &[-1, -1], &[-1, -1]),
            Some("unable to load model 'm', configuration expects model provides input with shape [-1]  for ragged input 'x', model provides [-1,-1]".into())
        );
    }
}
