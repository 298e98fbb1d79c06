//! The load-time checks over hand-made graphs: each mismatch Triton's ONNX Runtime
//! backend refuses, with its message, and the valid shapes it accepts.

use nereid_core::config::{normalize_and_validate, parse_model_config, NormalizeOptions};
use nereid_core::model::ModelSpec;
use nereid_core::DataType;

use super::{check_graph, Graph, ModelTensor};

/// The spec of model `m` from configuration `text`.
fn parse(text: &str) -> ModelSpec {
    let path = std::path::Path::new("config.pbtxt");
    let mut config = parse_model_config(path, text).expect("parses");
    normalize_and_validate(&mut config, "m", NormalizeOptions::default()).expect("valid");
    ModelSpec::new(config, 1).expect("builds")
}

/// Model `m` with one FP32 input and one output, each given by the fields after its
/// name and type.
fn spec(max_batch_size: u32, input: &str, output: &str) -> ModelSpec {
    parse(&format!(
        r#"backend: "identity" max_batch_size: {max_batch_size}
           input [ {{ name: "x" data_type: TYPE_FP32 {input} }} ]
           output [ {{ name: "y" data_type: TYPE_FP32 {output} }} ]"#
    ))
}

fn tensor(name: &str, datatype: DataType, dims: &[i64]) -> ModelTensor {
    ModelTensor {
        name: name.into(),
        datatype,
        dims: dims.to_vec(),
    }
}

/// The load error of `spec` over `graph`, if any.
fn error_of(spec: &ModelSpec, graph: &Graph) -> Option<String> {
    check_graph(spec, graph)
        .err()
        .map(|e| e.message().to_string())
}

/// The load error for `spec` over a graph with FP32 input `x` of `input_shape` and
/// output `y` of `output_shape`.
fn error(spec: &ModelSpec, input_shape: &[i64], output_shape: &[i64]) -> Option<String> {
    let graph = Graph {
        inputs: vec![tensor("x", DataType::Fp32, input_shape)],
        initializers: Vec::new(),
        outputs: vec![tensor("y", DataType::Fp32, output_shape)],
    };
    error_of(spec, &graph)
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

#[test]
fn names_datatypes_and_the_number_of_inputs_must_match() {
    let two_inputs = parse(
        r#"backend: "identity" max_batch_size: 0
           input [ { name: "b" data_type: TYPE_INT64 dims: [ 2 ] } ]
           output [ { name: "y" data_type: TYPE_STRING dims: [ 2 ] } ]"#,
    );
    let graph = |input_type: DataType| Graph {
        inputs: vec![
            tensor("b", input_type, &[2]),
            tensor("a", DataType::Fp32, &[2]),
        ],
        initializers: Vec::new(),
        outputs: vec![tensor("y", DataType::Bytes, &[2])],
    };
    assert_eq!(
        error_of(&two_inputs, &graph(DataType::Int64)),
        Some("unable to load model 'm', configuration expects 1 inputs, model provides 2".into())
    );
    let mut one = graph(DataType::Bytes);
    one.inputs.truncate(1);
    // INT64 declared, a string tensor in the graph; Triton names it TYPE_BYTES.
    assert_eq!(
        error_of(&two_inputs, &one),
        Some("unable to load model 'm', configuration expects datatype TYPE_INT64 for input 'b', model provides TYPE_BYTES".into())
    );
    // A name the graph lacks: the allowed ones are listed sorted, as Triton's std::set.
    let misnamed = parse(
        r#"backend: "identity" max_batch_size: 0
           input [ { name: "c" data_type: TYPE_FP32 dims: [ 2 ] },
                   { name: "b" data_type: TYPE_FP32 dims: [ 2 ] } ]
           output [ { name: "y" data_type: TYPE_STRING dims: [ 2 ] } ]"#,
    );
    assert_eq!(
        error_of(&misnamed, &graph(DataType::Fp32)),
        Some("unexpected inference input 'c', allowed inputs are: a, b".into())
    );
    let strings = parse(
        r#"backend: "identity" max_batch_size: 0
           input [ { name: "b" data_type: TYPE_STRING dims: [ 2 ] } ]
           output [ { name: "z" data_type: TYPE_STRING dims: [ 2 ] } ]"#,
    );
    assert_eq!(
        error_of(&strings, &one),
        Some("unexpected inference output 'z', allowed outputs are: y".into())
    );
}

#[test]
fn fixed_and_variable_dimensions() {
    let four = spec(8, "dims: [ 4 ]", "dims: [ -1 ]");
    assert_eq!(error(&four, &[-1, 4], &[-1, -1]), None);
    assert_eq!(error(&four, &[-1, -1], &[-1, -1]), None);
    assert_eq!(
        error(&four, &[-1, 3], &[-1, -1]),
        Some("model 'm', tensor 'x': the model expects 2 dimensions (shape [-1,3]) but the model configuration specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, making complete shape [-1,4])".into())
    );
    // An output whose graph dimension is fixed must not be declared variable.
    assert_eq!(
        error(&four, &[-1, 4], &[-1, 4]),
        Some("model 'm', tensor 'y': the model expects 2 dimensions (shape [-1,4]) but the model configuration specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit tensor shape, making complete shape [-1,-1])".into())
    );
}

#[test]
fn optional_inputs_may_be_initializers_and_never_batch() {
    let text = |max_batch_size: u32| {
        format!(
            r#"backend: "identity" max_batch_size: {max_batch_size}
               input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 2 ] }},
                       {{ name: "w" data_type: TYPE_FP32 dims: [ 2 ] optional: true }} ]
               output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 2 ] }} ]"#
        )
    };
    let graph = Graph {
        inputs: vec![tensor("x", DataType::Fp32, &[2])],
        initializers: vec![tensor("w", DataType::Fp32, &[2])],
        outputs: vec![tensor("y", DataType::Fp32, &[2])],
    };
    // The optional input is not counted, and found among the initializers.
    assert_eq!(error_of(&parse(&text(0)), &graph), None);
    let batching = Graph {
        inputs: vec![tensor("x", DataType::Fp32, &[-1, 2])],
        initializers: vec![tensor("w", DataType::Fp32, &[-1, 2])],
        outputs: vec![tensor("y", DataType::Fp32, &[-1, 2])],
    };
    assert_eq!(
        error_of(&parse(&text(4)), &batching),
        Some("unable to load model 'm', optional input 'w' is not supported for models that support batching".into())
    );
}

/// A batching sequence model: input INPUT, a START control of `start_type`, a CORRID
/// control and a state ACC_IN → ACC_OUT, all FP32 but CORRID (UINT64).
fn sequence_spec(start_type: &str) -> ModelSpec {
    parse(&format!(
        r#"backend: "identity" max_batch_size: 4
           input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
           output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
           sequence_batching {{
             control_input [
               {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START {start_type}: [ 0, 1 ] }} ] }},
               {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
             ]
             state [ {{ input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
           }}"#
    ))
}

/// The graph `sequence_spec` describes, with START of `start` type and dims.
fn sequence_graph(start: DataType, start_dims: &[i64]) -> Graph {
    Graph {
        inputs: vec![
            tensor("INPUT", DataType::Fp32, &[-1, 1]),
            tensor("ACC_IN", DataType::Fp32, &[-1, 1]),
            tensor("START", start, start_dims),
            tensor("CORRID", DataType::Uint64, &[-1, 1]),
        ],
        initializers: Vec::new(),
        outputs: vec![
            tensor("OUTPUT", DataType::Fp32, &[-1, 1]),
            tensor("ACC_OUT", DataType::Fp32, &[-1, 1]),
        ],
    }
}

#[test]
fn sequence_controls_are_inputs_of_shape_one_and_their_type() {
    let spec = sequence_spec("fp32_false_true");
    assert_eq!(
        error_of(&spec, &sequence_graph(DataType::Fp32, &[-1, 1])),
        None
    );
    assert_eq!(
        error_of(&spec, &sequence_graph(DataType::Fp32, &[-1, 2])),
        Some("unable to load model 'm', sequence control 'START' in model has dims [2] but dims [1] is expected".into())
    );
    assert_eq!(
        error_of(&spec, &sequence_graph(DataType::Fp32, &[-1])),
        Some("unable to load model 'm', sequence control 'START' in model has dims [] but dims [1] is expected".into())
    );
    assert_eq!(
        error_of(&sequence_spec("int32_false_true"), &sequence_graph(DataType::Fp32, &[-1, 1])),
        Some("unable to load model 'm', sequence control 'START', the model expects data-type FLOAT but the model configuration specifies data-type TYPE_INT32".into())
    );
    let mut missing = sequence_graph(DataType::Fp32, &[-1, 1]);
    missing.inputs.retain(|t| t.name != "CORRID");
    assert_eq!(
        error_of(&spec, &missing),
        Some("configuration specified sequence control 'CORRID', but model does not provide that input".into())
    );
    // The controls and the state count among the inputs the graph must have.
    let mut extra = sequence_graph(DataType::Fp32, &[-1, 1]);
    extra.inputs.push(tensor("MORE", DataType::Fp32, &[-1, 1]));
    assert_eq!(
        error_of(&spec, &extra),
        Some("unable to load model 'm', configuration expects 4 inputs, model provides 5".into())
    );
}

#[test]
fn state_tensors_are_checked_on_both_sides() {
    let spec = sequence_spec("fp32_false_true");
    let mut renamed = sequence_graph(DataType::Fp32, &[-1, 1]);
    renamed.outputs[1].name = "NEXT".into();
    assert_eq!(
        error_of(&spec, &renamed),
        Some("unexpected inference output 'ACC_OUT', allowed outputs are: NEXT, OUTPUT".into())
    );
    let mut typed = sequence_graph(DataType::Fp32, &[-1, 1]);
    typed.outputs[1].datatype = DataType::Fp16;
    assert_eq!(
        error_of(&spec, &typed),
        Some("unable to load model 'm', configuration expects datatype TYPE_FP32 for output state 'ACC_OUT', model provides TYPE_FP16".into())
    );
    let mut input = sequence_graph(DataType::Fp32, &[-1, 1]);
    input.inputs[1].datatype = DataType::Int32;
    assert_eq!(
        error_of(&spec, &input),
        Some("unable to load model 'm', configuration expects datatype TYPE_FP32 for input state 'ACC_IN', model provides TYPE_INT32".into())
    );
}
