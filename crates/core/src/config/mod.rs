//! Model configuration: `config.pbtxt` → generated `ModelConfig` → normalized (Triton's
//! defaults filled in) → validated. The result is immutable and read by everything else.
//! [`support`] says, for every field, whether Nereid honours it, accepts it without
//! effect, or refuses it.

#[cfg(test)]
mod fuzz_tests;
mod json;
mod normalize;
mod parse;
mod reshape;
pub mod support;

pub use json::{config_from_json, config_to_json};
pub use normalize::{normalize_and_validate, normalize_instance_groups, NormalizeOptions};
pub use parse::parse_model_config;
pub use support::check_supported;

/// The generated model configuration message (Triton's `inference.ModelConfig`).
pub use nereid_proto::inference::ModelConfig;

use nereid_proto::inference::model_config::SchedulingChoice;
use nereid_proto::inference::ModelEnsembling;

/// The `ensemble_scheduling` section of `config`, if it has one.
pub fn ensembling(config: &ModelConfig) -> Option<&ModelEnsembling> {
    match &config.scheduling_choice {
        Some(SchedulingChoice::EnsembleScheduling(e)) => Some(e),
        _ => None,
    }
}

/// Whether `config` describes an ensemble (by platform or by its scheduling section).
pub fn is_ensemble(config: &ModelConfig) -> bool {
    config.platform == "ensemble" || ensembling(config).is_some()
}

/// A loaded model's normalized configuration as the configuration endpoints answer it:
/// the message for gRPC and Triton's JSON for HTTP, rendered once at load. Nothing else
/// reads it; the server works from the typed [`crate::model::ModelSpec`].
#[derive(Debug, Clone)]
pub struct PublishedConfig {
    /// The normalized configuration.
    pub message: ModelConfig,
    /// `message` in Triton's JSON form.
    pub json: serde_json::Value,
}

impl PublishedConfig {
    /// Renders `message` for both frontends.
    pub fn new(message: ModelConfig) -> Self {
        Self {
            json: config_to_json(&message),
            message,
        }
    }
}
