//! Parses `config.pbtxt` as protobuf text format against the compiled `ModelConfig`
//! descriptor, so every field Triton defines is accepted and anything else is an error that
//! names the file, line and column.

use std::path::Path;

use miette::Diagnostic;
use prost_reflect::DynamicMessage;

use super::ModelConfig;
use crate::error::{Error, Result};

/// Fully qualified name of the configuration message in the descriptor pool.
pub(super) const MODEL_CONFIG_MESSAGE: &str = "inference.ModelConfig";

/// Parses the text of a `config.pbtxt`; `path` is only used in error messages.
pub fn parse_model_config(path: &Path, text: &str) -> Result<ModelConfig> {
    let descriptor = model_config_descriptor();
    let normalized = add_list_colons(text);
    let text = normalized.as_str();
    let message = DynamicMessage::parse_text_format(descriptor, text).map_err(|e| {
        let offset = e
            .labels()
            .and_then(|mut labels| labels.next())
            .map(|label| label.offset())
            .unwrap_or(text.len());
        let (line, column) = line_and_column(text, offset);
        Error::invalid_arg(format!(
            "failed to parse model configuration {}: line {line}, column {column}: {e}",
            path.display()
        ))
    })?;
    message.transcode_to::<ModelConfig>().map_err(|e| {
        Error::internal(format!(
            "model configuration {} could not be converted: {e}",
            path.display()
        ))
    })
}

/// The `ModelConfig` descriptor from the pool the proto crate compiled.
pub(super) fn model_config_descriptor() -> prost_reflect::MessageDescriptor {
    nereid_proto::descriptor_pool()
        .get_message_by_name(MODEL_CONFIG_MESSAGE)
        .expect("model_config.proto defines inference.ModelConfig")
}

/// Protobuf text format lets a repeated message field omit the colon before a list
/// (`input [ { ... } ]`), which Triton configs do everywhere but the reflection parser
/// does not accept. This puts the colon in, replacing the whitespace before `[` where
/// there is some so that line and column numbers of later errors stay exact.
fn add_list_colons(text: &str) -> String {
    let mut out: Vec<char> = Vec::with_capacity(text.len() + 8);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut in_comment = false;
    for c in text.chars() {
        if in_comment {
            in_comment = c != '\n';
        } else if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
        } else if c == '#' {
            in_comment = true;
        } else if c == '"' || c == '\'' {
            quote = Some(c);
        } else if c == '[' {
            let last_non_space = out.iter().rposition(|ch| !ch.is_whitespace());
            let after_field_name =
                last_non_space.is_some_and(|i| out[i].is_ascii_alphanumeric() || out[i] == '_');
            if after_field_name {
                let i = last_non_space.expect("checked above");
                if i + 1 < out.len() && out[i + 1] != '\n' {
                    out[i + 1] = ':';
                } else {
                    out.insert(i + 1, ':');
                }
            }
        }
        out.push(c);
    }
    out.into_iter().collect()
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_typical_config() {
        let text = r#"
            name: "add_sub"
            platform: "onnxruntime_onnx"
            max_batch_size: 8
            input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
            output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
            instance_group { count: 2 kind: KIND_CPU }
            parameters { key: "intra_op_thread_count" value { string_value: "1" } }
        "#;
        let config = parse_model_config(Path::new("m/config.pbtxt"), text).expect("valid");
        assert_eq!(config.name, "add_sub");
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input[0].dims, vec![4]);
        assert_eq!(config.instance_group[0].count, 2);
        assert_eq!(config.parameters["intra_op_thread_count"].string_value, "1");
    }

    #[test]
    fn unknown_field_names_file_line_and_column() {
        let text = "name: \"m\"\n  bogus_field: 3\n";
        let err = parse_model_config(Path::new("/r/m/config.pbtxt"), text).unwrap_err();
        let msg = err.message();
        assert!(msg.contains("/r/m/config.pbtxt"), "{msg}");
        assert!(msg.contains("line 2, column 3"), "{msg}");
        assert!(msg.contains("bogus_field"), "{msg}");
    }

    #[test]
    fn syntax_error_names_line() {
        let text = "name: \"m\"\nmax_batch_size: 8\ninput [ { name: \"x\" \n";
        let err = parse_model_config(Path::new("c.pbtxt"), text).unwrap_err();
        assert!(err.message().contains("c.pbtxt: line"), "{}", err.message());
    }

    #[test]
    fn list_colons_are_added_outside_strings_and_comments() {
        assert_eq!(add_list_colons("input [ {} ]"), "input:[ {} ]");
        assert_eq!(add_list_colons("input[{}]"), "input:[{}]");
        assert_eq!(add_list_colons("dims: [ 4 ]"), "dims: [ 4 ]");
        assert_eq!(
            add_list_colons("name: \"a [\" # b [\n"),
            "name: \"a [\" # b [\n"
        );
    }

    #[test]
    fn line_and_column_count_characters() {
        assert_eq!(line_and_column("ab\ncé d", 7), (2, 4));
        assert_eq!(line_and_column("", 0), (1, 1));
    }
}
