//! The model configuration in protobuf-JSON form, as Triton's `/config` endpoint prints it
//! (proto field names, enum names, 64-bit integers as strings, default values included) and
//! as clients send it in a repository `load` override.

use prost_reflect::{DeserializeOptions, DynamicMessage, SerializeOptions};

use super::parse::model_config_descriptor;
use super::ModelConfig;
use crate::error::{Error, Result};

/// Serializes `config` the way Triton's model configuration endpoint does.
pub fn config_to_json(config: &ModelConfig) -> serde_json::Value {
    let mut message = DynamicMessage::new(model_config_descriptor());
    message
        .transcode_from(config)
        .expect("ModelConfig and its descriptor come from the same .proto");
    // Triton's HTTP frontend prints 64-bit integers (dims) as JSON numbers.
    let options = SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .use_proto_field_name(true)
        .skip_default_fields(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .expect("serializing a protobuf message into a JSON value cannot fail")
}

/// Parses a protobuf-JSON model configuration (a repository `load` override).
pub fn config_from_json(text: &str) -> Result<ModelConfig> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    let message = DynamicMessage::deserialize_with_options(
        model_config_descriptor(),
        &mut deserializer,
        &options,
    )
    .and_then(|m| deserializer.end().map(|()| m))
    .map_err(|e| Error::invalid_arg(format!("failed to parse model configuration JSON: {e}")))?;
    message
        .transcode_to::<ModelConfig>()
        .map_err(|e| Error::internal(format!("model configuration could not be converted: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_proto_names_strings_for_int64_and_defaults() {
        let config = ModelConfig {
            name: "m".into(),
            max_batch_size: 4,
            input: vec![nereid_proto::inference::ModelInput {
                name: "x".into(),
                data_type: nereid_proto::inference::DataType::TypeFp32 as i32,
                dims: vec![16],
                ..Default::default()
            }],
            ..Default::default()
        };
        let json = config_to_json(&config);
        assert_eq!(json["max_batch_size"], 4);
        assert_eq!(json["input"][0]["data_type"], "TYPE_FP32");
        assert_eq!(json["input"][0]["dims"][0], 16);
        assert_eq!(json["backend"], "");
    }

    #[test]
    fn round_trips_through_json() {
        let text = r#"{"name":"m","max_batch_size":2,"input":[{"name":"x","data_type":"TYPE_INT32","dims":[3]}]}"#;
        let config = config_from_json(text).expect("valid");
        assert_eq!(config.input[0].dims, vec![3]);
        let back = config_to_json(&config);
        assert_eq!(back["input"][0]["data_type"], "TYPE_INT32");
    }

    #[test]
    fn rejects_unknown_json_fields() {
        assert!(config_from_json(r#"{"name":"m","nope":1}"#).is_err());
        assert!(config_from_json("{").is_err());
    }
}
