//! vLLM's `mistral` parser (the pre-v11 tokenizer path, which a Hugging Face tokenizer takes):
//! after `[TOOL_CALLS]`, a JSON array of `{"name": ..., "arguments": {...}}`. Text before the
//! marker is content; when the array does not parse, the text without markers is content.

use super::{call_from_object, Parsed};
use regex::Regex;
use std::sync::LazyLock;

/// The marker (a special token: decode without skipping special tokens).
pub(super) const TOOL_CALLS: &str = "[TOOL_CALLS]";

/// vLLM's fallback regex: from the first `[{` to the last `}]`.
static ARRAY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?s)\[\{.*\}\]").expect("a constant regex compiles"));

pub(super) fn parse(text: &str) -> Parsed {
    let Some(marker) = text.find(TOOL_CALLS) else {
        return Parsed::content(text);
    };
    let without_markers = text.replace(TOOL_CALLS, "");
    let tool_content = without_markers.trim();
    let array = serde_json::from_str::<serde_json::Value>(tool_content)
        .ok()
        .or_else(|| serde_json::from_str(ARRAY.find(tool_content)?.as_str()).ok());
    let calls = array.as_ref().and_then(|a| {
        a.as_array()?
            .iter()
            .map(|obj| call_from_object(obj, &["arguments"], false))
            .collect::<Option<Vec<_>>>()
    });
    match calls {
        Some(tool_calls) => Parsed {
            content: Some(text[..marker].to_owned()).filter(|c| !c.is_empty()),
            tool_calls,
        },
        None => Parsed {
            content: Some(tool_content.to_owned()),
            tool_calls: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolCall;

    #[test]
    fn array_of_calls() {
        let p = parse(
            r#"[TOOL_CALLS] [{"name": "add", "arguments": {"a": 3.5, "b": 4}}, {"name": "say", "arguments": {"text": "héllo"}}]"#,
        );
        assert_eq!(p.content, None);
        assert_eq!(
            p.tool_calls,
            vec![
                ToolCall {
                    name: "add".to_owned(),
                    arguments: r#"{"a": 3.5, "b": 4}"#.to_owned()
                },
                ToolCall {
                    name: "say".to_owned(),
                    arguments: r#"{"text": "héllo"}"#.to_owned()
                },
            ]
        );
    }

    #[test]
    fn content_before_marker_and_trailing_text_via_the_regex() {
        let p = parse(r#"Sure. [TOOL_CALLS][{"name": "f", "arguments": {}}] ok"#);
        assert_eq!(p.content.as_deref(), Some("Sure. "));
        assert_eq!(p.tool_calls.len(), 1);
        assert_eq!(p.tool_calls[0].arguments, "{}");
    }

    #[test]
    fn lookalikes_stay_content() {
        assert_eq!(
            parse("[TOOLS] are [{}]").content.as_deref(),
            Some("[TOOLS] are [{}]")
        );
        let p = parse("[TOOL_CALLS] [{\"name\": \"f\"}]");
        assert_eq!(p.content.as_deref(), Some("[{\"name\": \"f\"}]"));
        assert!(p.tool_calls.is_empty());
        let p = parse("[TOOL_CALLS] {\"name\": \"f\", \"arguments\": {}}");
        assert!(p.tool_calls.is_empty(), "an object, not an array");
        let p = parse("[TOOL_CALLS] not json ");
        assert_eq!(p.content.as_deref(), Some("not json"));
    }
}
