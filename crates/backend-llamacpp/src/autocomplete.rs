//! The configuration Triton's vLLM backend completes, completed the same way: the
//! inputs and outputs of its convention that the config leaves out are added (those this
//! engine serves), the model is decoupled, and batching is left to the engine
//! (`max_batch_size: 0`). So a `config.pbtxt` of only `backend: "llamacpp"` serves.

use nereid_core::config::ModelConfig;
use nereid_core::DataType;
use nereid_proto::inference::{ModelInput, ModelOutput, ModelTransactionPolicy};

/// The convention's inputs: name, type, dims, optional.
const INPUTS: [(&str, DataType, i64, bool); 8] = [
    ("text_input", DataType::Bytes, 1, false),
    ("stream", DataType::Bool, 1, true),
    ("sampling_parameters", DataType::Bytes, 1, true),
    ("exclude_input_in_output", DataType::Bool, 1, true),
    ("return_finish_reason", DataType::Bool, 1, true),
    ("return_cumulative_logprob", DataType::Bool, 1, true),
    ("return_num_input_tokens", DataType::Bool, 1, true),
    ("return_num_output_tokens", DataType::Bool, 1, true),
];

/// The convention's outputs: name, type, dims.
const OUTPUTS: [(&str, DataType, i64); 5] = [
    ("text_output", DataType::Bytes, -1),
    ("finish_reason", DataType::Bytes, -1),
    ("cumulative_logprob", DataType::Fp32, -1),
    ("num_input_tokens", DataType::Uint32, 1),
    ("num_output_tokens", DataType::Uint32, -1),
];

/// Completes `config` as Triton's vLLM backend does.
pub fn complete(config: &mut ModelConfig) {
    for (name, datatype, dim, optional) in INPUTS {
        if !config.input.iter().any(|t| t.name == name) {
            config.input.push(ModelInput {
                name: name.into(),
                data_type: datatype.to_config() as i32,
                dims: vec![dim],
                optional,
                ..Default::default()
            });
        }
    }
    for (name, datatype, dim) in OUTPUTS {
        if !config.output.iter().any(|t| t.name == name) {
            config.output.push(ModelOutput {
                name: name.into(),
                data_type: datatype.to_config() as i32,
                dims: vec![dim],
                ..Default::default()
            });
        }
    }
    config.model_transaction_policy = Some(ModelTransactionPolicy { decoupled: true });
    config.max_batch_size = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_config_gets_the_vllm_convention() {
        let mut config = ModelConfig {
            name: "llm".into(),
            backend: "llamacpp".into(),
            max_batch_size: 8,
            ..Default::default()
        };
        complete(&mut config);
        let names: Vec<_> = config.input.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names[0], "text_input");
        assert_eq!(names.len(), INPUTS.len());
        assert!(!config.input[0].optional && config.input[1].optional);
        assert_eq!(config.output.len(), OUTPUTS.len());
        assert_eq!(config.max_batch_size, 0);
        assert!(config.model_transaction_policy.expect("set").decoupled);
    }

    #[test]
    fn tensors_the_config_declares_are_kept() {
        let mut config = ModelConfig {
            input: vec![ModelInput {
                name: "text_input".into(),
                data_type: DataType::Bytes.to_config() as i32,
                dims: vec![-1],
                ..Default::default()
            }],
            ..Default::default()
        };
        complete(&mut config);
        assert_eq!(config.input[0].dims, [-1], "the config's own dims");
        assert_eq!(
            config
                .input
                .iter()
                .filter(|t| t.name == "text_input")
                .count(),
            1
        );
    }
}
