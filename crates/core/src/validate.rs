//! Checks a request against the model before anything is allocated or queued: every input
//! known and present, datatypes, shapes against dims (with -1), batch size, byte sizes and
//! requested outputs. Messages follow Triton's wording, including its request-id prefix.

use crate::error::{Error, Result};
use crate::model::{format_dims, ModelSpec};
use crate::request::{element_count, split_bytes_elements, InferRequest, InputTensor};
use nereid_proto::DataType;

/// Validates `request` for `spec` and returns its batch size (1 for non-batching models).
pub fn validate_request(spec: &ModelSpec, request: &InferRequest) -> Result<usize> {
    let prefixed = |e: Error| e.prefixed(&request_prefix(&request.id));
    check_repeats(request).map_err(prefixed)?;
    // Triton checks the requested outputs before the inputs, and reports an unknown one
    // without the request-id prefix.
    if let Some(outputs) = &request.requested_outputs {
        for name in outputs {
            if spec.output(name).is_none() {
                return Err(Error::invalid_arg(format!(
                    "unexpected inference output '{name}' for model '{}'",
                    spec.name
                )));
            }
        }
    }
    check(spec, request).map_err(prefixed)
}

/// Triton's `[request id: ...] ` prefix for request errors.
pub fn request_prefix(id: &str) -> String {
    if id.is_empty() {
        return "[request id: <id_unknown>] ".to_string();
    }
    // A client's id is echoed whole up to a length any log or trailer takes; a longer one
    // would bury (or, over gRPC, overflow) the message it prefixes.
    let mut end = id.len().min(MAX_ECHOED_ID_BYTES);
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < id.len() { "..." } else { "" };
    format!("[request id: {}{more}] ", &id[..end])
}

/// The longest part of a request id echoed in an error message.
const MAX_ECHOED_ID_BYTES: usize = 256;

/// Triton refuses a name given twice when the request is built, before anything else.
fn check_repeats(request: &InferRequest) -> Result<()> {
    if let Some(name) = first_repeated(request.inputs.iter().map(|i| i.name.as_str())) {
        return Err(Error::invalid_arg(format!(
            "input '{name}' already exists in request"
        )));
    }
    let wanted = request.requested_outputs.iter().flatten();
    if let Some(name) = first_repeated(wanted.map(String::as_str)) {
        return Err(Error::invalid_arg(format!(
            "output '{name}' already exists in request"
        )));
    }
    Ok(())
}

fn check(spec: &ModelSpec, request: &InferRequest) -> Result<usize> {
    let model = &spec.name;
    for input in &request.inputs {
        if spec.input(&input.name).is_none() {
            return Err(Error::invalid_arg(format!(
                "unexpected inference input '{}' for model '{model}'",
                input.name
            )));
        }
    }
    let missing: Vec<&str> = spec
        .inputs
        .iter()
        .filter(|t| !t.optional && !request.inputs.iter().any(|i| i.name == t.name))
        .map(|t| t.name.as_str())
        .collect();
    if !missing.is_empty() {
        let got: Vec<String> = request
            .inputs
            .iter()
            .map(|i| format!("'{}'", i.name))
            .collect();
        let missing: Vec<String> = missing.iter().map(|n| format!("'{n}'")).collect();
        let required = spec.inputs.iter().filter(|t| !t.optional).count();
        // With optional inputs Triton gives the range of input counts it takes.
        let expected = if required == spec.inputs.len() {
            format!("{required} inputs")
        } else {
            format!(
                "number of inputs between {required} and {}",
                spec.inputs.len()
            )
        };
        return Err(Error::invalid_arg(format!(
            "expected {expected} but got {} inputs for model '{model}'. Got input(s) [{}], but missing required input(s) [{}]. Please provide all required input(s).",
            request.inputs.len(),
            got.join(","),
            missing.join(",")
        )));
    }
    let batch_size = batch_size(spec, request)?;
    for input in &request.inputs {
        check_input(spec, input)?;
    }
    check_correlation_id_type(spec, request)?;
    Ok(batch_size)
}

/// Triton's `ValidateCorrelationId`: a model with a CORRID control takes string IDs
/// only into a string tensor and numeric IDs (an absent one counts as the number 0) only
/// into an integer one.
fn check_correlation_id_type(spec: &ModelSpec, request: &InferRequest) -> Result<()> {
    let Some(corrid) = spec
        .scheduling
        .sequence()
        .and_then(|s| s.controls.corrid.as_ref())
    else {
        return Ok(());
    };
    let text = matches!(
        request.parameter("sequence_id"),
        Some(crate::request::ParamValue::String(_))
    );
    let given = if text {
        DataType::Bytes
    } else {
        DataType::Uint64
    };
    let fits = match given {
        DataType::Bytes => corrid.datatype == DataType::Bytes,
        _ => matches!(
            corrid.datatype,
            DataType::Uint64 | DataType::Int64 | DataType::Uint32 | DataType::Int32
        ),
    };
    if fits {
        return Ok(());
    }
    Err(Error::invalid_arg(format!(
        "sequence batching control '{}' data-type is '{given}', but model '{}' expects '{}'",
        corrid.name, spec.name, corrid.datatype
    )))
}

/// The first name that comes a second time. Requests name a handful of tensors: up to
/// `FEW` are compared pairwise (no hash set built per request), more go through a set.
fn first_repeated<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Option<&'a str> {
    const FEW: usize = 16;
    if names.clone().nth(FEW).is_none() {
        return names
            .clone()
            .enumerate()
            .find(|(at, name)| names.clone().take(*at).any(|earlier| earlier == *name))
            .map(|(_, name)| name);
    }
    let mut seen = std::collections::HashSet::new();
    names.into_iter().find(|name| !seen.insert(*name))
}

fn batch_size(spec: &ModelSpec, request: &InferRequest) -> Result<usize> {
    if spec.max_batch_size == 0 {
        return Ok(1);
    }
    let model = &spec.name;
    let mut batch: Option<i64> = None;
    for input in &request.inputs {
        let Some(&first) = input.shape.first() else {
            return Err(Error::invalid_arg(format!(
                "input '{}' has no shape but model requires batch dimension for '{model}'",
                input.name
            )));
        };
        match batch {
            None => batch = Some(first),
            Some(b) if b != first => {
                return Err(Error::invalid_arg(format!(
                    "input '{}' batch size does not match other inputs for '{model}'",
                    input.name
                )));
            }
            Some(_) => {}
        }
    }
    let batch = batch.unwrap_or(1);
    // A batch of 0 is a request with no elements, which Triton accepts (L0_infer_zero
    // sends one through a non-batching ensemble); negative sizes wrap past the maximum
    // here as they do in Triton's unsigned comparison.
    if batch as u64 > spec.max_batch_size as u64 {
        return Err(Error::invalid_arg(format!(
            "inference request batch-size must be <= {} for '{model}'",
            spec.max_batch_size
        )));
    }
    Ok(batch as usize)
}

fn check_input(spec: &ModelSpec, input: &InputTensor) -> Result<()> {
    let model = &spec.name;
    let tensor = spec
        .input(&input.name)
        .expect("unknown inputs were rejected before");
    if input.datatype != tensor.datatype {
        return Err(Error::invalid_arg(format!(
            "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
            input.name, input.datatype, tensor.datatype
        )));
    }
    let shape = if spec.max_batch_size > 0 {
        &input.shape[1..]
    } else {
        &input.shape[..]
    };
    let matches = shape.len() == tensor.dims.len()
        && shape
            .iter()
            .zip(&tensor.dims)
            .all(|(&got, &want)| got >= 0 && (want == -1 || got == want));
    if !matches {
        let note = if spec.max_batch_size > 0 {
            ". NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for more info on max_batch_size."
        } else {
            ""
        };
        return Err(Error::invalid_arg(format!(
            "unexpected shape for input '{}' for model '{model}'. Expected {}, got {}{note}",
            input.name,
            format_dims(&spec.client_dims(&tensor.dims)),
            format_dims(&input.shape)
        )));
    }
    let elements = element_count(&input.shape).ok_or_else(|| {
        Error::invalid_arg(format!(
            "shape {} of input '{}' for model '{model}' is too large",
            format_dims(&input.shape),
            input.name
        ))
    })?;
    match input.datatype.element_size() {
        Some(size) => {
            let expected = elements.saturating_mul(size);
            if expected != input.byte_size() {
                return Err(Error::invalid_arg(format!(
                    "input byte size mismatch for input '{}' for model '{model}'. Expected {expected}, got {}",
                    input.name,
                    input.byte_size()
                )));
            }
        }
        None => check_bytes_input(model, input, elements)?,
    }
    Ok(())
}

fn check_bytes_input(model: &str, input: &InputTensor, elements: usize) -> Result<()> {
    debug_assert_eq!(input.datatype, DataType::Bytes);
    let parts = split_bytes_elements(&input.data).map_err(|why| {
        Error::invalid_arg(format!(
            "input '{}' of model '{model}' is not a valid BYTES tensor: {why}",
            input.name
        ))
    })?;
    if parts.len() != elements {
        return Err(Error::invalid_arg(format!(
            "expected {elements} string elements for inference input '{}' for model '{model}', got {}",
            input.name,
            parts.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{normalize_and_validate, parse_model_config, NormalizeOptions};
    use bytes::Bytes;
    use std::path::Path;

    fn add_sub() -> ModelSpec {
        let mut c = parse_model_config(
            Path::new("config.pbtxt"),
            r#"platform: "onnxruntime_onnx" max_batch_size: 8
               input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [4] },
                       { name: "INPUT1" data_type: TYPE_FP32 dims: [4] } ]
               output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] } ]"#,
        )
        .expect("valid");
        normalize_and_validate(&mut c, "add_sub", NormalizeOptions::default()).expect("valid");
        ModelSpec::new(c, 1).expect("valid")
    }

    fn input(name: &str, shape: &[i64], bytes: usize) -> InputTensor {
        InputTensor {
            name: name.into(),
            datatype: DataType::Fp32,
            shape: shape.to_vec(),
            data: Bytes::from(vec![0u8; bytes]),
            device: None,
        }
    }

    fn request(inputs: Vec<InputTensor>) -> InferRequest {
        InferRequest {
            model_name: "add_sub".into(),
            inputs,
            ..Default::default()
        }
    }

    #[test]
    fn accepts_a_good_batch() {
        let r = request(vec![
            input("INPUT0", &[2, 4], 32),
            input("INPUT1", &[2, 4], 32),
        ]);
        assert_eq!(validate_request(&add_sub(), &r), Ok(2));
    }

    #[test]
    fn triton_messages_for_common_mistakes() {
        let spec = add_sub();
        let cases = [
            (
                vec![input("INPUT0", &[1, 4], 16)],
                "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'add_sub'",
            ),
            (
                vec![input("INPUT0", &[9, 4], 144), input("INPUT1", &[9, 4], 144)],
                "inference request batch-size must be <= 8 for 'add_sub'",
            ),
            (
                vec![input("INPUT0", &[1, 5], 20), input("INPUT1", &[1, 5], 20)],
                "unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,4], got [1,5]",
            ),
            (
                vec![input("INPUT0", &[1, 4], 12), input("INPUT1", &[1, 4], 16)],
                "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 16, got 12",
            ),
            (
                vec![input("X", &[1, 4], 16)],
                "unexpected inference input 'X' for model 'add_sub'",
            ),
            (
                vec![input("INPUT0", &[1, 4], 16), input("INPUT0", &[1, 4], 16)],
                "[request id: <id_unknown>] input 'INPUT0' already exists in request",
            ),
        ];
        for (inputs, want) in cases {
            let err = validate_request(&spec, &request(inputs)).unwrap_err();
            assert!(err.message().contains(want), "{} vs {want}", err.message());
        }
        let mut r = request(vec![
            input("INPUT0", &[1, 4], 16),
            input("INPUT1", &[1, 4], 16),
        ]);
        r.requested_outputs = Some(vec!["OUTPUT1".into(), "OUTPUT0".into(), "OUTPUT1".into()]);
        let err = validate_request(&spec, &r).unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::InvalidArg);
        assert_eq!(
            err.message(),
            "[request id: <id_unknown>] output 'OUTPUT1' already exists in request"
        );
        r.id = "é".repeat(1000);
        let err = validate_request(&spec, &r).unwrap_err();
        assert!(
            err.message()
                .starts_with(&format!("[request id: {}...] output", "é".repeat(128))),
            "{}",
            err.message()
        );
        // An unknown output is reported before an unknown input (L0_output_name).
        r.id = String::new();
        r.requested_outputs = Some(vec!["DUMMY".into()]);
        r.inputs[0].name = "X".into();
        let err = validate_request(&spec, &r).unwrap_err();
        assert_eq!(
            err.message(),
            "unexpected inference output 'DUMMY' for model 'add_sub'"
        );
        r.inputs[0].name = "INPUT0".into();
        r.requested_outputs = None;
        r.inputs[1].datatype = DataType::Fp64;
        r.id = "7".into();
        let err = validate_request(&spec, &r).unwrap_err();
        assert_eq!(
            err.message(),
            "[request id: 7] inference input 'INPUT1' data-type is 'FP64', but model 'add_sub' expects 'FP32'"
        );
    }

    /// add_sub as a sequence model whose CORRID control has `corrid_type`.
    fn sequence_add_sub(corrid_type: &str) -> ModelSpec {
        let mut c = parse_model_config(
            Path::new("config.pbtxt"),
            &format!(
                r#"platform: "onnxruntime_onnx" max_batch_size: 8
                   input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }} ]
                   output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }} ]
                   sequence_batching {{ control_input [ {{ name: "CORRID"
                     control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }} ] }} ] }}"#
            ),
        )
        .expect("valid");
        normalize_and_validate(&mut c, "add_sub", NormalizeOptions::default()).expect("valid");
        ModelSpec::new(c, 1).expect("valid")
    }

    #[test]
    fn a_correlation_id_must_fit_the_corrid_control() {
        use crate::request::ParamValue;
        let with_id = |id: ParamValue| {
            let mut r = request(vec![input("INPUT0", &[1, 4], 16)]);
            r.parameters.push(("sequence_id".into(), id));
            r
        };
        let text = with_id(ParamValue::String("corrid".into()));
        let number = with_id(ParamValue::Uint(123));
        let err = validate_request(&sequence_add_sub("TYPE_UINT64"), &text).unwrap_err();
        assert_eq!(
            err.message(),
            "[request id: <id_unknown>] sequence batching control 'CORRID' data-type is 'BYTES', but model 'add_sub' expects 'UINT64'"
        );
        let err = validate_request(&sequence_add_sub("TYPE_STRING"), &number).unwrap_err();
        assert!(
            err.message()
                .ends_with("data-type is 'UINT64', but model 'add_sub' expects 'BYTES'"),
            "{}",
            err.message()
        );
        for fitting in ["TYPE_INT32", "TYPE_UINT32", "TYPE_INT64", "TYPE_UINT64"] {
            assert_eq!(validate_request(&sequence_add_sub(fitting), &number), Ok(1));
        }
        assert_eq!(
            validate_request(&sequence_add_sub("TYPE_STRING"), &text),
            Ok(1)
        );
    }

    #[test]
    fn with_optional_inputs_the_expected_count_is_a_range() {
        let mut spec = add_sub();
        spec.inputs[1].optional = true;
        let err =
            validate_request(&spec, &request(vec![input("INPUT1", &[1, 4], 16)])).unwrap_err();
        assert_eq!(
            err.message(),
            "[request id: <id_unknown>] expected number of inputs between 1 and 2 but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT1'], but missing required input(s) ['INPUT0']. Please provide all required input(s)."
        );
    }

    #[test]
    fn first_repeated_finds_the_second_occurrence_among_few_and_many() {
        assert_eq!(first_repeated(["a", "b", "c"].into_iter()), None);
        assert_eq!(first_repeated(["a", "b", "a", "b"].into_iter()), Some("a"));
        assert_eq!(first_repeated(["a", "b", "b", "a"].into_iter()), Some("b"));
        let many: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
        let names = || many.iter().map(String::as_str);
        assert_eq!(first_repeated(names()), None);
        assert_eq!(first_repeated(names().chain(["n7", "n3"])), Some("n7"));
    }

    #[test]
    fn a_batch_of_zero_elements_is_accepted_as_by_triton() {
        let spec = add_sub();
        let empty = request(vec![
            input("INPUT0", &[0, 4], 0),
            input("INPUT1", &[0, 4], 0),
        ]);
        assert_eq!(validate_request(&spec, &empty).expect("accepted"), 0);
        let negative = request(vec![
            input("INPUT0", &[-1, 4], 0),
            input("INPUT1", &[-1, 4], 0),
        ]);
        assert!(validate_request(&spec, &negative).is_err());
    }
}
