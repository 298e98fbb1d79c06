//! The model configuration in protobuf-JSON form, as Triton's `/config` endpoint prints it
//! (proto field names, enum names, 64-bit integers as strings, default values included) and
//! as clients send it in a repository `load` override.

use std::borrow::Cow;

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

/// Parses a protobuf-JSON model configuration (a repository `load` override). Object keys
/// may be unquoted identifiers, as protobuf's JSON parser (Triton's) allows.
pub fn config_from_json(text: &str) -> Result<ModelConfig> {
    let text = quote_bare_keys(text);
    let mut deserializer = serde_json::Deserializer::from_str(&text);
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

/// `text` with every bare object key (`{direct: {}}`: letters, digits and `_`, after `{` or
/// `,` and before `:`) put in quotes; borrowed when there is none.
fn quote_bare_keys(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut quoted = String::new();
    let mut copied = 0;
    let mut in_string = false;
    let mut escaped = false;
    // The last byte outside strings and whitespace.
    let mut last = 0u8;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        if (b.is_ascii_alphabetic() || b == b'_') && (last == b'{' || last == b',') {
            let end = i + bytes[i..].iter().take_while(|&&b| word(b)).count();
            let next = bytes[end..].iter().find(|b| !b.is_ascii_whitespace());
            if next == Some(&b':') {
                quoted.push_str(&text[copied..i]);
                quoted.push('"');
                quoted.push_str(&text[i..end]);
                quoted.push('"');
                copied = end;
            }
            last = bytes[end - 1];
            i = end;
            continue;
        }
        if b == b'"' {
            in_string = true;
        }
        if !b.is_ascii_whitespace() {
            last = b;
        }
        i += 1;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    quoted.push_str(&text[copied..]);
    Cow::Owned(quoted)
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
    fn bare_keys_are_read_as_protobuf_reads_them() {
        // L0_iterative_sequence's load override.
        let text = r#"{"name":"m", sequence_batching : { "iterative_sequence" : true, direct: { "max_queue_delay_microseconds" : 10 }}, "backend": "a, b:c {d: e}"}"#;
        let config = config_from_json(text).expect("valid");
        assert_eq!(config.backend, "a, b:c {d: e}", "strings are left alone");
        use nereid_proto::inference::model_config::SchedulingChoice;
        assert!(matches!(
            config.scheduling_choice,
            Some(SchedulingChoice::SequenceBatching(ref s)) if s.iterative_sequence
        ));
        assert_eq!(
            quote_bare_keys(r#"{"a": [true, false]}"#),
            r#"{"a": [true, false]}"#
        );
        assert!(matches!(quote_bare_keys(r#"{"a":1}"#), Cow::Borrowed(_)));
    }

    #[test]
    fn rejects_unknown_json_fields() {
        assert!(config_from_json(r#"{"name":"m","nope":1}"#).is_err());
        assert!(config_from_json("{").is_err());
    }
}
