//! Model configuration: `config.pbtxt` → generated `ModelConfig` → normalized (Triton's
//! defaults filled in) → validated. The result is immutable and read by everything else.

mod json;
mod normalize;
mod parse;

pub use json::{config_from_json, config_to_json};
pub use normalize::{normalize_and_validate, NormalizeOptions};
pub use parse::parse_model_config;

/// The generated model configuration message (Triton's `inference.ModelConfig`).
pub use nereid_proto::inference::ModelConfig;
