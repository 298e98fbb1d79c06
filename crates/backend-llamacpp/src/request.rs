//! One inference request read in the tensor convention of Triton's vLLM backend: the
//! prompt (`text_input`), `stream`, `sampling_parameters` (JSON), and the flags choosing
//! what each response carries.

use nereid_core::request::{split_bytes_elements, InferRequest, InputTensor};
use nereid_core::{DataType, Error, Result};

use crate::sampling::Sampling;

/// Which optional outputs a request asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Returns {
    /// `finish_reason` (`stop` or `length`) on the last response.
    pub finish_reason: bool,
    /// `cumulative_logprob`: the sum of the generated tokens' log probabilities.
    pub cumulative_logprob: bool,
    /// `num_input_tokens`: the prompt's tokens.
    pub num_input_tokens: bool,
    /// `num_output_tokens`: the tokens this response adds.
    pub num_output_tokens: bool,
}

/// A request as the engine generates it.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The prompt text.
    pub prompt: String,
    /// One response per new piece of text, instead of one at the end.
    pub stream: bool,
    /// Leave the prompt out of a non-streamed answer (a streamed one never has it).
    pub exclude_input_in_output: bool,
    /// How tokens are drawn and when generation ends.
    pub sampling: Sampling,
    /// The optional outputs asked for.
    pub returns: Returns,
}

impl Generation {
    /// Reads `request`; errors name the input at fault.
    pub fn read(request: &InferRequest) -> Result<Self> {
        let input = |name: &str| request.inputs.iter().find(|t| t.name == name);
        let prompt = input("text_input")
            .ok_or_else(|| Error::invalid_arg("input 'text_input' is required"))
            .and_then(first_string)?;
        let flag = |name: &str| input(name).map_or(Ok(false), first_bool);
        let sampling = match input("sampling_parameters") {
            Some(t) => Sampling::parse(&first_string(t)?)?,
            None => Sampling::default(),
        };
        Ok(Self {
            prompt,
            stream: flag("stream")?,
            exclude_input_in_output: flag("exclude_input_in_output")?,
            sampling,
            returns: Returns {
                finish_reason: flag("return_finish_reason")?,
                cumulative_logprob: flag("return_cumulative_logprob")?,
                num_input_tokens: flag("return_num_input_tokens")?,
                num_output_tokens: flag("return_num_output_tokens")?,
            },
        })
    }
}

/// The first element of a BYTES input, as UTF-8 text.
fn first_string(tensor: &InputTensor) -> Result<String> {
    if tensor.datatype != DataType::Bytes {
        return Err(Error::invalid_arg(format!(
            "input '{}' must be BYTES",
            tensor.name
        )));
    }
    let elements = split_bytes_elements(&tensor.data)
        .map_err(|e| Error::invalid_arg(format!("input '{}': {e}", tensor.name)))?;
    let first = elements
        .first()
        .ok_or_else(|| Error::invalid_arg(format!("input '{}' is empty", tensor.name)))?;
    String::from_utf8(first.to_vec())
        .map_err(|_| Error::invalid_arg(format!("input '{}' is not UTF-8 text", tensor.name)))
}

/// The first element of a BOOL input.
fn first_bool(tensor: &InputTensor) -> Result<bool> {
    if tensor.datatype != DataType::Bool {
        return Err(Error::invalid_arg(format!(
            "input '{}' must be BOOL",
            tensor.name
        )));
    }
    tensor
        .data
        .first()
        .map(|b| *b != 0)
        .ok_or_else(|| Error::invalid_arg(format!("input '{}' is empty", tensor.name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use nereid_core::request::join_bytes_elements;

    fn text(name: &str, value: &str) -> InputTensor {
        InputTensor {
            name: name.into(),
            datatype: DataType::Bytes,
            shape: vec![1],
            data: Bytes::from(join_bytes_elements([value.as_bytes()])),
            device: None,
        }
    }

    fn flag(name: &str, value: bool) -> InputTensor {
        InputTensor {
            name: name.into(),
            datatype: DataType::Bool,
            shape: vec![1],
            data: Bytes::from(vec![u8::from(value)]),
            device: None,
        }
    }

    fn request(inputs: Vec<InputTensor>) -> InferRequest {
        InferRequest {
            inputs,
            ..Default::default()
        }
    }

    #[test]
    fn the_vllm_inputs_are_read() {
        let g = Generation::read(&request(vec![
            text("text_input", "Hello"),
            flag("stream", true),
            text(
                "sampling_parameters",
                r#"{"max_tokens": 5, "temperature": 0}"#,
            ),
            flag("exclude_input_in_output", true),
            flag("return_finish_reason", true),
            flag("return_num_output_tokens", true),
        ]))
        .expect("valid");
        assert_eq!(g.prompt, "Hello");
        assert!(g.stream && g.exclude_input_in_output);
        assert_eq!((g.sampling.max_tokens, g.sampling.temperature), (5, 0.0));
        assert_eq!(
            g.returns,
            Returns {
                finish_reason: true,
                num_output_tokens: true,
                ..Default::default()
            }
        );
    }

    #[test]
    fn only_the_prompt_is_required() {
        let g = Generation::read(&request(vec![text("text_input", "x")])).expect("valid");
        assert!(!g.stream);
        assert_eq!(g.sampling, Sampling::default());
        assert_eq!(g.returns, Returns::default());
        let e = Generation::read(&request(vec![])).expect_err("no prompt");
        assert!(e.message().contains("'text_input'"), "{e}");
    }

    #[test]
    fn bad_inputs_are_named() {
        let e = Generation::read(&request(vec![
            text("text_input", "x"),
            text("sampling_parameters", "{nope"),
        ]))
        .expect_err("bad JSON");
        assert!(e.message().contains("'sampling_parameters'"), "{e}");
        let e = Generation::read(&request(vec![flag("text_input", true)])).expect_err("type");
        assert!(e.message().contains("must be BYTES"), "{e}");
        let e = Generation::read(&request(vec![text("text_input", "x"), text("stream", "y")]))
            .expect_err("type");
        assert!(e.message().contains("'stream' must be BOOL"), "{e}");
    }
}
