//! A request's place in a sequence: its correlation ID and START/END flags, read from the
//! `sequence_id`, `sequence_start` and `sequence_end` request parameters.

use std::fmt;

use crate::error::{Error, Result};
use crate::request::{InferRequest, ParamValue};

/// A correlation ID: a number, or a string for models whose CORRID control is a string.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SequenceId {
    /// `sequence_id` given as an integer.
    Number(u64),
    /// `sequence_id` given as a string.
    Text(String),
}

impl fmt::Display for SequenceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SequenceId::Number(n) => write!(f, "{n}"),
            SequenceId::Text(s) => f.write_str(s),
        }
    }
}

/// The sequence fields of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceFlags {
    /// Correlation ID.
    pub id: SequenceId,
    /// First request of the sequence.
    pub start: bool,
    /// Last request of the sequence.
    pub end: bool,
}

impl SequenceFlags {
    /// Reads the flags of `request` for `model`, with Triton's errors for a missing ID.
    pub fn of(request: &InferRequest, model: &str) -> Result<Self> {
        let id = match request.parameter("sequence_id") {
            // gRPC carries IDs as int64; Triton reinterprets them as uint64.
            Some(ParamValue::Int(n)) if *n != 0 => Some(SequenceId::Number(*n as u64)),
            Some(ParamValue::Uint(n)) if *n != 0 => Some(SequenceId::Number(*n)),
            Some(ParamValue::String(s)) if !s.is_empty() => Some(SequenceId::Text(s.clone())),
            _ => None,
        };
        let id = id.ok_or_else(|| {
            Error::invalid_arg(format!(
                "inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
            ))
        })?;
        let flag = |name| matches!(request.parameter(name), Some(ParamValue::Bool(true)));
        Ok(Self {
            id,
            start: flag("sequence_start"),
            end: flag("sequence_end"),
        })
    }
}

/// The sequence parameters Triton's ensemble puts on each response made from its steps'
/// outputs: the request's correlation ID (0 without one; a string stays a string) and
/// its START and END flags (core's ensemble scheduler carries them with every tensor a
/// step produces; L0_simple_ensemble reads them from a streamed sequence).
pub fn ensemble_response_parameters(request: &InferRequest) -> Vec<(String, ParamValue)> {
    let id = match request.parameter("sequence_id") {
        Some(ParamValue::String(s)) => ParamValue::String(s.clone()),
        Some(ParamValue::Int(n)) => ParamValue::Int(*n),
        // Triton sends the unsigned ID as int64.
        Some(ParamValue::Uint(n)) => ParamValue::Int(*n as i64),
        _ => ParamValue::Int(0),
    };
    let flag = |name| {
        ParamValue::Bool(matches!(
            request.parameter(name),
            Some(ParamValue::Bool(true))
        ))
    };
    vec![
        ("sequence_id".to_string(), id),
        ("sequence_start".to_string(), flag("sequence_start")),
        ("sequence_end".to_string(), flag("sequence_end")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(params: Vec<(&str, ParamValue)>) -> InferRequest {
        InferRequest {
            parameters: params
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn ids_and_flags() {
        let r = request(vec![
            ("sequence_id", ParamValue::Int(7)),
            ("sequence_start", ParamValue::Bool(true)),
        ]);
        let f = SequenceFlags::of(&r, "m").expect("flags");
        assert_eq!((f.id, f.start, f.end), (SequenceId::Number(7), true, false));
        let r = request(vec![("sequence_id", ParamValue::String("abc".into()))]);
        assert_eq!(
            SequenceFlags::of(&r, "m").expect("flags").id.to_string(),
            "abc"
        );
        for missing in [
            request(vec![]),
            request(vec![("sequence_id", ParamValue::Int(0))]),
            request(vec![("sequence_id", ParamValue::String(String::new()))]),
        ] {
            let e = SequenceFlags::of(&missing, "m").expect_err("no id");
            assert_eq!(
                e.message(),
                "inference request to model 'm' must specify a non-zero or non-empty correlation ID"
            );
        }
    }

    #[test]
    fn ensemble_responses_carry_the_requests_sequence_or_zero() {
        let named = |params: Vec<(String, ParamValue)>| {
            params
                .into_iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
        };
        let end = request(vec![
            ("sequence_id", ParamValue::Uint(9)),
            ("sequence_end", ParamValue::Bool(true)),
        ]);
        assert_eq!(
            named(ensemble_response_parameters(&end)),
            [
                "sequence_id=Int(9)",
                "sequence_start=Bool(false)",
                "sequence_end=Bool(true)"
            ]
        );
        assert_eq!(
            named(ensemble_response_parameters(&request(vec![]))),
            [
                "sequence_id=Int(0)",
                "sequence_start=Bool(false)",
                "sequence_end=Bool(false)"
            ]
        );
    }
}
