//! What `tokenizer_config.json` (and its neighbours `chat_template.jinja`,
//! `special_tokens_map.json`) say about a model's text: its chat template(s) and special
//! tokens, read as transformers reads them.

use crate::error::{io_error, ChatError};
use serde_json::Value;
use std::path::Path;

/// The special-token attributes transformers passes to every chat template, in its order
/// (`SpecialTokensMixin.SPECIAL_TOKENS_ATTRIBUTES`).
const SPECIAL_TOKENS: [&str; 8] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "additional_special_tokens",
];

/// The template-relevant part of a model's tokenizer configuration.
#[derive(Debug, Default, Clone)]
pub(crate) struct TokenizerConfig {
    /// Named templates: one named `default` when the config holds a single string, else the
    /// config's list of `{name, template}` (transformers picks `tool_use` when tools are given).
    pub templates: Vec<(String, String)>,
    /// Special tokens as template variables (`bos_token` -> `"<s>"`); the list one as a list.
    pub special_tokens: Vec<(String, Value)>,
}

impl TokenizerConfig {
    /// Reads the files of `dir`; `Ok(None)` when it has none of them.
    pub fn from_dir(dir: &Path) -> Result<Option<Self>, ChatError> {
        let config = read_json(&dir.join("tokenizer_config.json"))?;
        let tokens_map = read_json(&dir.join("special_tokens_map.json"))?;
        let jinja_path = dir.join("chat_template.jinja");
        let jinja = match std::fs::read_to_string(&jinja_path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error(&jinja_path, e)),
        };
        if config.is_none() && jinja.is_none() {
            return Ok(None);
        }
        let mut parsed = match &config {
            Some(config) => Self::from_json(config),
            None => TokenizerConfig::default(),
        };
        // transformers prefers a separate chat_template.jinja over the config's field.
        if let Some(jinja) = jinja {
            parsed.templates = vec![("default".to_owned(), jinja)];
        }
        if let Some(Value::Object(map)) = tokens_map {
            for name in SPECIAL_TOKENS {
                if !parsed.special_tokens.iter().any(|(n, _)| n == name) {
                    if let Some(token) = map.get(name).and_then(token_value) {
                        parsed.special_tokens.push((name.to_owned(), token));
                    }
                }
            }
        }
        Ok(Some(parsed))
    }

    /// The template and tokens of a parsed `tokenizer_config.json`.
    pub fn from_json(config: &Value) -> Self {
        let templates = match config.get("chat_template") {
            Some(Value::String(source)) => vec![("default".to_owned(), source.clone())],
            Some(Value::Array(named)) => named
                .iter()
                .filter_map(|entry| {
                    let name = entry.get("name")?.as_str()?;
                    let source = entry.get("template")?.as_str()?;
                    Some((name.to_owned(), source.to_owned()))
                })
                .collect(),
            _ => Vec::new(),
        };
        let special_tokens = SPECIAL_TOKENS
            .iter()
            .filter_map(|name| {
                let token = token_value(config.get(*name)?)?;
                Some(((*name).to_owned(), token))
            })
            .collect();
        TokenizerConfig {
            templates,
            special_tokens,
        }
    }
}

/// A token as a template sees it: `"<s>"` or `{"content": "<s>", ...}` (an AddedToken) become
/// the string; a list (additional_special_tokens) a list of strings; `null` nothing.
fn token_value(v: &Value) -> Option<Value> {
    match v {
        Value::String(s) => Some(Value::String(s.clone())),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(Value::from),
        Value::Array(items) => Some(Value::Array(items.iter().filter_map(token_value).collect())),
        _ => None,
    }
}

/// `Ok(None)` when the file is absent; an `Io` error naming the path when it cannot be read
/// or is not JSON.
pub(crate) fn read_json(path: &Path) -> Result<Option<Value>, ChatError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| io_error(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_as_strings_or_added_token_objects() {
        let c = TokenizerConfig::from_json(&json!({
            "chat_template": "{{ bos_token }}",
            "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
            "eos_token": "</s>",
            "pad_token": null,
            "additional_special_tokens": ["<a>", {"content": "<b>"}]
        }));
        assert_eq!(
            c.templates,
            vec![("default".to_owned(), "{{ bos_token }}".to_owned())]
        );
        assert_eq!(
            c.special_tokens,
            vec![
                ("bos_token".to_owned(), json!("<s>")),
                ("eos_token".to_owned(), json!("</s>")),
                (
                    "additional_special_tokens".to_owned(),
                    json!(["<a>", "<b>"])
                ),
            ]
        );
    }

    #[test]
    fn named_templates() {
        let c = TokenizerConfig::from_json(&json!({"chat_template": [
            {"name": "default", "template": "d"}, {"name": "tool_use", "template": "t"}
        ]}));
        assert_eq!(c.templates.len(), 2);
        assert_eq!(c.templates[1], ("tool_use".to_owned(), "t".to_owned()));
    }

    #[test]
    fn jinja_file_wins_and_map_fills_gaps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"chat_template": "old", "eos_token": "</s>"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("chat_template.jinja"), "new").unwrap();
        std::fs::write(
            dir.path().join("special_tokens_map.json"),
            r#"{"eos_token": "<ignored>", "bos_token": {"content": "<s>"}}"#,
        )
        .unwrap();
        let c = TokenizerConfig::from_dir(dir.path()).unwrap().unwrap();
        assert_eq!(c.templates, vec![("default".to_owned(), "new".to_owned())]);
        assert_eq!(c.special_tokens[0], ("eos_token".to_owned(), json!("</s>")));
        assert_eq!(c.special_tokens[1], ("bos_token".to_owned(), json!("<s>")));
    }

    #[test]
    fn empty_dir_is_none_and_bad_json_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        assert!(TokenizerConfig::from_dir(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join("tokenizer_config.json"), "{oops").unwrap();
        let e = TokenizerConfig::from_dir(dir.path()).unwrap_err();
        assert!(e.message().contains("tokenizer_config.json"), "{e}");
    }
}
