//! `ModelInferRequest` → core [`InferRequest`] and core [`InferResponse`] →
//! `ModelInferResponse`, with Triton's checks and messages
//! (server `src/grpc/infer_handler.cc`: `SetInferenceRequestMetadata`, `InferGRPCToInput`).
//!
//! Raw tensor bytes arrive as `Bytes` slices of the received message and are handed to the
//! core unchanged; only typed `contents` need a conversion (see [`crate::contents`]).

use std::collections::HashMap;

use bytes::Bytes;
use nereid_core::request::{
    Classifications, InferRequest, InferResponse, InputTensor, ParamValue, Parameters,
};
use nereid_core::shm::{frontend_query, OutputTarget, ShmParams, ShmRegistry};
use nereid_core::{DataType, Error, Result};
use nereid_proto::inference::infer_parameter::ParameterChoice;
use nereid_proto::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use nereid_proto::inference::model_infer_response::InferOutputTensor;
use nereid_proto::inference::{InferParameter, ModelInferRequest, ModelInferResponse};

use crate::contents::contents_to_bytes;

/// A request/tensor parameter map as the wire carries it.
type WireParameters = HashMap<String, InferParameter>;

/// Parses a model version string as Triton's `GetModelVersionFromString`: empty means
/// "the server's choice" (`None`), otherwise a non-negative integer.
pub fn parse_version(version: &str) -> Result<Option<i64>> {
    if version.is_empty() {
        return Ok(None);
    }
    let parsed: i64 = version.parse().map_err(|_| {
        Error::invalid_arg(format!(
            "failed to get model version from specified version string '{version}' (details: stol), version should be an integral value > 0"
        ))
    })?;
    if parsed < 0 {
        return Err(Error::invalid_arg(format!(
            "invalid model version specified '{version}' , version should be an integral value > 0"
        )));
    }
    Ok(Some(parsed))
}

/// Requested outputs that go into shared memory, by name.
pub type OutputTargets = HashMap<String, OutputTarget>;

/// Decodes a wire request into the core's request, consuming it so that raw input bytes
/// move into the core without a copy; tensors in shared memory are resolved against
/// `regions`.
pub fn decode_request(
    request: ModelInferRequest,
    regions: &ShmRegistry,
) -> Result<(InferRequest, OutputTargets)> {
    let ModelInferRequest {
        model_name,
        model_version,
        id,
        parameters,
        inputs,
        outputs,
        raw_input_contents,
    } = request;
    let model_version = parse_version(&model_version)?;
    let parameters = decode_parameters(parameters)?;
    let inputs = decode_inputs(&model_name, inputs, raw_input_contents, regions)?;
    let mut targets = OutputTargets::new();
    let (requested_outputs, classification) = decode_outputs(outputs, regions, &mut targets)?;
    Ok((
        InferRequest {
            model_name,
            model_version,
            id,
            parameters,
            inputs,
            requested_outputs,
            classification,
            trace: None,
            output_query: Some(frontend_query(&targets)),
        },
        targets,
    ))
}

/// Encodes a core response; output bytes move into `raw_output_contents` (one entry per
/// output, even an empty one, as Triton does), except outputs bound for shared memory,
/// which are written there and get an empty entry.
pub fn encode_response(
    response: InferResponse,
    targets: &OutputTargets,
) -> Result<ModelInferResponse> {
    let mut outputs = Vec::with_capacity(response.outputs.len());
    let mut raw_output_contents = Vec::with_capacity(response.outputs.len());
    for output in response.outputs {
        let data = match targets.get(&output.name) {
            Some(target) => {
                target.write(&output)?;
                Bytes::new()
            }
            None => output.data,
        };
        outputs.push(InferOutputTensor {
            name: output.name,
            datatype: output.datatype.as_str().to_string(),
            shape: output.shape,
            parameters: HashMap::new(),
            contents: None,
        });
        raw_output_contents.push(data);
    }
    Ok(ModelInferResponse {
        model_name: response.model_name,
        model_version: response.model_version.to_string(),
        id: response.id,
        parameters: encode_parameters(response.parameters),
        outputs,
        raw_output_contents,
    })
}

/// Parameters as the wire carries them.
pub fn encode_parameters(parameters: Parameters) -> WireParameters {
    parameters
        .into_iter()
        .map(|(key, value)| {
            let choice = match value {
                ParamValue::Bool(b) => ParameterChoice::BoolParam(b),
                ParamValue::Int(i) => ParameterChoice::Int64Param(i),
                ParamValue::Uint(u) => ParameterChoice::Uint64Param(u),
                ParamValue::Double(d) => ParameterChoice::DoubleParam(d),
                ParamValue::String(s) => ParameterChoice::StringParam(s),
            };
            let parameter = InferParameter {
                parameter_choice: Some(choice),
            };
            (key, parameter)
        })
        .collect()
}

/// The one `triton_` request parameter Triton accepts (decoupled streaming: send an
/// empty final response). It is checked but not passed on: it steers the frontend, not
/// the model.
const EMPTY_FINAL_RESPONSE: &str = "triton_enable_empty_final_response";

/// The response parameter that marks a stream's last response for its request.
pub const FINAL_RESPONSE: &str = "triton_final_response";

/// Whether a stream request asks for the final flag of a decoupled model as an empty
/// response (`triton_enable_empty_final_response: true`).
pub fn wants_empty_final(request: &ModelInferRequest) -> bool {
    matches!(
        request
            .parameters
            .get(EMPTY_FINAL_RESPONSE)
            .and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    )
}

/// Marks `response` as its request's last (or not) in a stream.
pub fn mark_final(response: &mut ModelInferResponse, last: bool) {
    response.parameters.insert(
        FINAL_RESPONSE.to_string(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::BoolParam(last)),
        },
    );
}

/// Request parameters, type-checked as Triton does, sorted by key so that the first error
/// reported and the order the core sees do not depend on hash-map order.
fn decode_parameters(parameters: WireParameters) -> Result<Parameters> {
    let mut entries: Vec<(String, InferParameter)> = parameters.into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut decoded = Vec::with_capacity(entries.len());
    for (key, parameter) in entries {
        let value = decode_parameter(&key, parameter.parameter_choice)?;
        if key != EMPTY_FINAL_RESPONSE {
            decoded.push((key, value));
        }
    }
    Ok(decoded)
}

fn decode_parameter(key: &str, choice: Option<ParameterChoice>) -> Result<ParamValue> {
    use ParameterChoice as P;
    let wrong_type = |expected: &str| {
        Error::invalid_arg(format!(
            "invalid value type for '{key}' parameter, expected {expected}."
        ))
    };
    match key {
        "sequence_id" => match choice {
            Some(P::Int64Param(v)) => Ok(ParamValue::Int(v)),
            Some(P::StringParam(s)) => Ok(ParamValue::String(s)),
            _ => Err(wrong_type("int64_param or string_param")),
        },
        "sequence_start" | "sequence_end" => match choice {
            Some(P::BoolParam(b)) => Ok(ParamValue::Bool(b)),
            _ => Err(wrong_type("bool_param")),
        },
        "priority" => match choice {
            Some(P::Int64Param(v)) if v < 0 => Err(Error::invalid_arg(
                "invalid value for 'priority', expected value >= 0.",
            )),
            Some(P::Int64Param(v)) => Ok(ParamValue::Int(v)),
            Some(P::Uint64Param(v)) => Ok(unsigned(v)),
            _ => Err(wrong_type("int64_param or uint64_param")),
        },
        "timeout" => match choice {
            Some(P::Int64Param(v)) => Ok(ParamValue::Int(v)),
            _ => Err(wrong_type("int64_param")),
        },
        EMPTY_FINAL_RESPONSE => match choice {
            Some(P::BoolParam(b)) => Ok(ParamValue::Bool(b)),
            _ => Err(wrong_type("bool_param")),
        },
        _ if key.starts_with("triton_") => Err(Error::invalid_arg(format!(
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: {EMPTY_FINAL_RESPONSE}"
        ))),
        _ => match choice {
            Some(P::Int64Param(v)) => Ok(ParamValue::Int(v)),
            Some(P::BoolParam(b)) => Ok(ParamValue::Bool(b)),
            Some(P::StringParam(s)) => Ok(ParamValue::String(s)),
            _ => Err(wrong_type("int64_param, bool_param, or string_param")),
        },
    }
}

/// `Uint` is only for values that do not fit `Int` (see [`ParamValue`]).
fn unsigned(v: u64) -> ParamValue {
    i64::try_from(v).map_or(ParamValue::Uint(v), ParamValue::Int)
}

/// Inputs with their data: shared memory, typed `contents`, or the next
/// `raw_input_contents` entry (raw entries go, in order, to the inputs that have neither).
fn decode_inputs(
    model: &str,
    inputs: Vec<InferInputTensor>,
    raw_input_contents: Vec<Bytes>,
    regions: &ShmRegistry,
) -> Result<Vec<InputTensor>> {
    let raw_count = raw_input_contents.len();
    let mut raw = raw_input_contents.into_iter();
    let mut decoded = Vec::with_capacity(inputs.len());
    for input in inputs {
        let InferInputTensor {
            name,
            datatype,
            shape,
            parameters,
            contents,
        } = input;
        let Some(datatype) = DataType::parse(&datatype) else {
            return Err(Error::invalid_arg(format!(
                "invalid datatype '{datatype}' for input tensor '{name}' for model '{model}'"
            )));
        };
        let mut device = None;
        let data = if let Some(shm) = shm_params(&name, &parameters)?.resolve(&name)? {
            let (data, on_gpu) = regions.input_data(&shm)?;
            if contents.is_some() {
                return Err(Error::invalid_arg(format!(
                    "unexpected 'content' provided when using shared memory for input tensor '{name}' for model '{model}'"
                )));
            }
            device = on_gpu;
            data
        } else if let Some(contents) = contents {
            if raw_count > 0 {
                return Err(Error::invalid_arg(format!(
                    "contents field must not be specified when using raw_input_contents for '{name}' for model '{model}'"
                )));
            }
            contents_to_bytes(model, &name, datatype, &contents)?
        } else if let Some(data) = raw.next() {
            data
        } else {
            return Err(Error::invalid_arg(format!(
                "unable to find data for input tensor '{name}' for model '{model}' in request."
            )));
        };
        decoded.push(InputTensor {
            name,
            datatype,
            shape,
            data,
            device,
        });
    }
    let unused = raw.len();
    if unused > 0 {
        return Err(Error::invalid_arg(format!(
            "expected one raw_input_contents entry per input for model '{model}', got {raw_count} entries for {} inputs",
            raw_count - unused
        )));
    }
    Ok(decoded)
}

/// Requested output names (`None`, every output, when the request lists none) and the
/// outputs requested as classifications; outputs bound for shared memory go into
/// `targets`. The checks come in Triton's order: shared-memory parameters, then
/// `classification`, then the two together, then the region itself.
fn decode_outputs(
    outputs: Vec<InferRequestedOutputTensor>,
    regions: &ShmRegistry,
    targets: &mut OutputTargets,
) -> Result<(Option<Vec<String>>, Classifications)> {
    if outputs.is_empty() {
        return Ok((None, Vec::new()));
    }
    let mut classification = Vec::new();
    let names = outputs
        .into_iter()
        .map(|output| {
            let shm = shm_params(&output.name, &output.parameters)?.resolve(&output.name)?;
            let classes = classification_param(&output.parameters)?;
            if let Some(count) = classes {
                if shm.is_some() {
                    return Err(Error::invalid_arg(
                        "output can't set both 'shared_memory_region' and 'classification'",
                    ));
                }
                classification.push((output.name.clone(), count));
            }
            if let Some(shm) = shm {
                targets.insert(output.name.clone(), regions.output(&shm)?);
            }
            Ok(output.name)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((Some(names), classification))
}

/// The `classification` parameter of a requested output (Triton's
/// `ParseClassificationParams`): an int64_param above 0, kept as Triton keeps it, in 32
/// bits.
fn classification_param(parameters: &WireParameters) -> Result<Option<u32>> {
    let Some(param) = parameters.get("classification") else {
        return Ok(None);
    };
    match param.parameter_choice {
        Some(ParameterChoice::Int64Param(count)) if count > 0 => Ok(Some(count as u32)),
        Some(ParameterChoice::Int64Param(_)) => Err(Error::invalid_arg(
            "invalid value for 'classification' parameter, expected >= 0",
        )),
        _ => Err(Error::invalid_arg(
            "invalid value type for 'classification' parameter, expected int64_param",
        )),
    }
}

/// The shared-memory parameters of a tensor, with Triton's type checks.
fn shm_params(tensor: &str, parameters: &WireParameters) -> Result<ShmParams> {
    let wrong_type = |key: &str, expected: &str| {
        Error::invalid_arg(format!(
            "invalid value type for '{key}' parameter for tensor '{tensor}', expected {expected}."
        ))
    };
    let region = match parameters
        .get("shared_memory_region")
        .and_then(|p| p.parameter_choice.as_ref())
    {
        None => None,
        Some(ParameterChoice::StringParam(s)) => Some(s.clone()),
        Some(_) => return Err(wrong_type("shared_memory_region", "string_param")),
    };
    let number = |key: &str| match parameters
        .get(key)
        .and_then(|p| p.parameter_choice.as_ref())
    {
        None => Ok(None),
        Some(ParameterChoice::Int64Param(v)) => u64::try_from(*v).map(Some).map_err(|_| {
            Error::invalid_arg(format!("'{key}' of tensor '{tensor}' must not be negative"))
        }),
        Some(ParameterChoice::Uint64Param(v)) => Ok(Some(*v)),
        Some(_) => Err(wrong_type(key, "int64_param")),
    };
    Ok(ShmParams {
        region,
        offset: number("shared_memory_offset")?,
        byte_size: number("shared_memory_byte_size")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(request: ModelInferRequest) -> Result<InferRequest> {
        decode_request(request, &ShmRegistry::default()).map(|(request, _)| request)
    }
    use nereid_core::ErrorKind;
    use nereid_proto::inference::InferTensorContents;

    fn param(choice: ParameterChoice) -> InferParameter {
        InferParameter {
            parameter_choice: Some(choice),
        }
    }

    fn input(
        name: &str,
        datatype: &str,
        contents: Option<InferTensorContents>,
    ) -> InferInputTensor {
        InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape: vec![2],
            parameters: HashMap::new(),
            contents,
        }
    }

    fn request(inputs: Vec<InferInputTensor>, raw: Vec<Bytes>) -> ModelInferRequest {
        ModelInferRequest {
            model_name: "m".into(),
            inputs,
            raw_input_contents: raw,
            ..Default::default()
        }
    }

    #[test]
    fn raw_and_contents_together_are_rejected() {
        let contents = InferTensorContents {
            fp32_contents: vec![1.0, 2.0],
            ..Default::default()
        };
        let r = request(
            vec![input("A", "FP32", None), input("B", "FP32", Some(contents))],
            vec![Bytes::from_static(&[0; 8])],
        );
        let e = decode(r).expect_err("mixed data");
        assert_eq!(e.kind(), ErrorKind::InvalidArg);
        assert_eq!(
            e.message(),
            "contents field must not be specified when using raw_input_contents for 'B' for model 'm'"
        );
    }

    #[test]
    fn raw_contents_pass_through_without_copy() {
        let raw = Bytes::from(vec![0u8; 8]);
        let pointer = raw.as_ptr();
        let decoded =
            decode(request(vec![input("A", "FP32", None)], vec![raw])).expect("valid request");
        assert_eq!(decoded.inputs[0].data.as_ptr(), pointer);
        assert_eq!(decoded.inputs[0].datatype, DataType::Fp32);
        assert_eq!(decoded.model_version, None);
        assert_eq!(decoded.requested_outputs, None);
    }

    #[test]
    fn raw_count_must_match_inputs() {
        let too_few = request(
            vec![input("A", "FP32", None), input("B", "FP32", None)],
            vec![Bytes::new()],
        );
        let e = decode(too_few).expect_err("missing data");
        assert_eq!(
            e.message(),
            "unable to find data for input tensor 'B' for model 'm' in request."
        );
        let too_many = request(
            vec![input("A", "FP32", None)],
            vec![Bytes::new(), Bytes::new()],
        );
        let e = decode(too_many).expect_err("extra data");
        assert_eq!(e.kind(), ErrorKind::InvalidArg);
        assert!(
            e.message().contains("got 2 entries for 1 inputs"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn unknown_datatype_and_shared_memory_are_rejected() {
        let e = decode(request(vec![input("A", "FLOAT", None)], vec![Bytes::new()]))
            .expect_err("bad datatype");
        assert_eq!(e.kind(), ErrorKind::InvalidArg);
        let mut shm = input("A", "FP32", None);
        shm.parameters.insert(
            "shared_memory_region".into(),
            param(ParameterChoice::StringParam("r".into())),
        );
        let e = decode(request(vec![shm.clone()], vec![])).expect_err("no byte size");
        assert_eq!(
            e.message(),
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'A'"
        );
        shm.parameters.insert(
            "shared_memory_byte_size".into(),
            param(ParameterChoice::Int64Param(4)),
        );
        let e = decode(request(vec![shm], vec![])).expect_err("unknown region");
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(e.message(), "Unable to find shared memory region: 'r'");
    }

    #[test]
    fn parameter_types_are_checked() {
        use ParameterChoice as P;
        let bad = [
            ("sequence_id", P::BoolParam(true), "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
            ("sequence_start", P::Int64Param(1), "invalid value type for 'sequence_start' parameter, expected bool_param."),
            ("sequence_end", P::StringParam("x".into()), "invalid value type for 'sequence_end' parameter, expected bool_param."),
            ("priority", P::Int64Param(-1), "invalid value for 'priority', expected value >= 0."),
            ("priority", P::BoolParam(true), "invalid value type for 'priority' parameter, expected int64_param or uint64_param."),
            ("timeout", P::Uint64Param(1), "invalid value type for 'timeout' parameter, expected int64_param."),
            ("triton_x", P::BoolParam(true), "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response"),
            ("triton_enable_empty_final_response", P::Int64Param(1), "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."),
            ("custom", P::DoubleParam(1.5), "invalid value type for 'custom' parameter, expected int64_param, bool_param, or string_param."),
        ];
        for (key, choice, message) in bad {
            let e = decode_parameter(key, Some(choice)).expect_err(key);
            assert_eq!(e.kind(), ErrorKind::InvalidArg);
            assert_eq!(e.message(), message);
        }
        assert!(decode_parameter("custom", None).is_err());
        let good = [
            ("sequence_id", P::Int64Param(7), ParamValue::Int(7)),
            (
                "sequence_id",
                P::StringParam("s".into()),
                ParamValue::String("s".into()),
            ),
            ("sequence_start", P::BoolParam(true), ParamValue::Bool(true)),
            ("priority", P::Uint64Param(3), ParamValue::Int(3)),
            (
                "priority",
                P::Uint64Param(u64::MAX),
                ParamValue::Uint(u64::MAX),
            ),
            ("timeout", P::Int64Param(100), ParamValue::Int(100)),
            (
                "custom",
                P::StringParam("v".into()),
                ParamValue::String("v".into()),
            ),
        ];
        for (key, choice, value) in good {
            assert_eq!(decode_parameter(key, Some(choice)).expect(key), value);
        }
    }

    #[test]
    fn parameters_are_sorted_filtered_and_round_trip() {
        let mut r = request(vec![], vec![]);
        r.parameters
            .insert("b".into(), param(ParameterChoice::Int64Param(1)));
        r.parameters
            .insert("a".into(), param(ParameterChoice::BoolParam(false)));
        r.parameters.insert(
            "triton_enable_empty_final_response".into(),
            param(ParameterChoice::BoolParam(true)),
        );
        let decoded = decode(r).expect("valid");
        assert_eq!(
            decoded.parameters,
            vec![
                ("a".to_string(), ParamValue::Bool(false)),
                ("b".to_string(), ParamValue::Int(1))
            ]
        );
        let wire = encode_parameters(decoded.parameters);
        assert_eq!(wire["b"], param(ParameterChoice::Int64Param(1)));
    }

    #[test]
    fn versions_parse_as_triton_does() {
        assert_eq!(parse_version("").expect("empty"), None);
        assert_eq!(parse_version("3").expect("number"), Some(3));
        assert_eq!(
            parse_version("x").expect_err("text").kind(),
            ErrorKind::InvalidArg
        );
        assert!(parse_version("-1")
            .expect_err("negative")
            .message()
            .starts_with("invalid model version specified '-1'"));
    }

    #[test]
    fn outputs_map_to_requested_names() {
        let mut r = request(vec![], vec![]);
        r.outputs.push(InferRequestedOutputTensor {
            name: "OUT".into(),
            parameters: HashMap::new(),
        });
        let decoded = decode(r.clone()).expect("valid");
        assert_eq!(decoded.requested_outputs, Some(vec!["OUT".to_string()]));
        assert!(decoded.classification.is_empty());
    }

    fn with_classification(value: ParameterChoice) -> ModelInferRequest {
        let mut r = request(vec![], vec![]);
        r.outputs.push(InferRequestedOutputTensor {
            name: "OUT".into(),
            parameters: HashMap::from([("classification".into(), param(value))]),
        });
        r
    }

    #[test]
    fn classification_is_parsed_as_triton_does() {
        let decoded = decode(with_classification(ParameterChoice::Int64Param(3))).expect("valid");
        assert_eq!(decoded.requested_outputs, Some(vec!["OUT".to_string()]));
        assert_eq!(decoded.classification, vec![("OUT".to_string(), 3)]);
        // Triton keeps the count in 32 bits.
        let decoded = decode(with_classification(ParameterChoice::Int64Param(
            (1 << 32) + 2,
        )))
        .expect("valid");
        assert_eq!(decoded.classification, vec![("OUT".to_string(), 2)]);
        for bad in [0, -1] {
            let e = decode(with_classification(ParameterChoice::Int64Param(bad))).expect_err("bad");
            assert_eq!(e.kind(), ErrorKind::InvalidArg);
            assert_eq!(
                e.message(),
                "invalid value for 'classification' parameter, expected >= 0"
            );
        }
        for wrong in [
            ParameterChoice::Uint64Param(2),
            ParameterChoice::StringParam("2".into()),
            ParameterChoice::BoolParam(true),
        ] {
            let e = decode(with_classification(wrong)).expect_err("wrong type");
            assert_eq!(
                e.message(),
                "invalid value type for 'classification' parameter, expected int64_param"
            );
        }
    }

    #[test]
    fn classification_and_shared_memory_conflict() {
        let mut r = with_classification(ParameterChoice::Int64Param(1));
        let parameters = &mut r.outputs[0].parameters;
        parameters.insert(
            "shared_memory_region".into(),
            param(ParameterChoice::StringParam("nowhere".into())),
        );
        parameters.insert(
            "shared_memory_byte_size".into(),
            param(ParameterChoice::Int64Param(8)),
        );
        // Refused before the (unregistered) region is looked up, as in Triton.
        let e = decode(r).expect_err("conflict");
        assert_eq!(e.kind(), ErrorKind::InvalidArg);
        assert_eq!(
            e.message(),
            "output can't set both 'shared_memory_region' and 'classification'"
        );
    }
}
