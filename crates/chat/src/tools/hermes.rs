//! vLLM's `hermes` parser (Hermes 2/3, Qwen 2.5): `<tool_call>{"name": ..., "arguments":
//! {...}}</tool_call>` blocks, the last one possibly unclosed. Content is the text before the
//! first block; text between and after blocks is dropped; when any block fails to parse, the
//! whole text is content.

use super::{call_from_object, Parsed, ToolCall};

/// The opening marker.
pub(super) const OPEN: &str = "<tool_call>";
/// The closing marker.
pub(super) const CLOSE: &str = "</tool_call>";

pub(super) fn parse(text: &str) -> Parsed {
    let Some(first) = text.find(OPEN) else {
        return Parsed::content(text);
    };
    let mut calls = Vec::new();
    let mut rest = &text[first..];
    while let Some(start) = rest.find(OPEN) {
        let body = &rest[start + OPEN.len()..];
        let (inner, after) = match body.find(CLOSE) {
            Some(end) => (&body[..end], &body[end + CLOSE.len()..]),
            None => (body, ""),
        };
        match call_from_block(inner) {
            Some(call) => calls.push(call),
            None => return Parsed::content(text),
        }
        rest = after;
    }
    Parsed {
        content: Some(text[..first].to_owned()).filter(|c| !c.is_empty()),
        tool_calls: calls,
    }
}

/// The call inside one block, `None` when it is not a call.
pub(super) fn call_from_block(inner: &str) -> Option<ToolCall> {
    let obj: serde_json::Value = serde_json::from_str(inner).ok()?;
    call_from_object(&obj, &["arguments"], false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_content_before() {
        let p = parse(
            "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
        );
        assert_eq!(p.content.as_deref(), Some("I'll check.\n"));
        assert_eq!(
            p.tool_calls,
            vec![
                ToolCall {
                    name: "get_weather".to_owned(),
                    arguments: r#"{"city": "Zürich"}"#.to_owned()
                },
                ToolCall {
                    name: "now".to_owned(),
                    arguments: "{}".to_owned()
                },
            ]
        );
    }

    #[test]
    fn unclosed_last_block() {
        let p = parse("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1]}}");
        assert_eq!(p.content, None);
        assert_eq!(p.tool_calls[0].arguments, r#"{"a": [1]}"#);
    }

    #[test]
    fn lookalikes_stay_content() {
        for text in [
            "plain text",
            "<tool_call>not json</tool_call>",
            "<tool_call>{\"name\": \"f\"}</tool_call>",
            "<tool_call></tool_call>",
            "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>{oops",
            "<toolcall>{\"name\": \"f\", \"arguments\": {}}</toolcall>",
        ] {
            let p = parse(text);
            assert_eq!(p.content.as_deref(), Some(text), "{text}");
            assert!(p.tool_calls.is_empty(), "{text}");
        }
    }
}
