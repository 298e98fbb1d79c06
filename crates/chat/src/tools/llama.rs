//! vLLM's `llama3_json` parser: the first run of JSON objects (at most two levels of braces,
//! as vLLM's regex allows) separated by `;`, each `{"name": ..., "parameters"|"arguments":
//! ...}`. When it parses, the whole text is tool calls (no content); when any part fails,
//! the whole text is content.

use super::{call_from_object, Parsed};
use regex::Regex;
use std::sync::LazyLock;

/// The marker Llama 3.1 writes before a tool call in some prompt formats.
pub(super) const PYTHON_TAG: &str = "<|python_tag|>";

/// vLLM's `tool_call_regex`, unchanged.
static CALLS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}(?:\s*;\s*\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\})*")
        .expect("a constant regex compiles")
});

pub(super) fn parse(text: &str) -> Parsed {
    if !(text.contains(PYTHON_TAG) || text.contains('{')) {
        return Parsed::content(text);
    }
    let Some(found) = CALLS.find(text) else {
        return Parsed::content(text);
    };
    let calls: Option<Vec<_>> = found
        .as_str()
        .split(';')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            let obj: serde_json::Value = serde_json::from_str(part).ok()?;
            // vLLM writes these arguments with Python's default ensure_ascii=True.
            call_from_object(&obj, &["arguments", "parameters"], true)
        })
        .collect();
    match calls {
        Some(tool_calls) => Parsed {
            content: None,
            tool_calls,
        },
        None => Parsed::content(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolCall;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        }
    }

    #[test]
    fn one_call_with_parameters() {
        let p = parse(r#"{"name": "get_weather", "parameters": {"city":"Paris","units":"°C"}}"#);
        assert_eq!(p.content, None);
        assert_eq!(
            p.tool_calls,
            vec![call(
                "get_weather",
                r#"{"city": "Paris", "units": "\u00b0C"}"#
            )]
        );
    }

    #[test]
    fn python_tag_and_several_calls() {
        let p = parse(
            "<|python_tag|>{\"name\": \"a\", \"arguments\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}",
        );
        assert_eq!(p.content, None);
        assert_eq!(
            p.tool_calls,
            vec![call("a", r#"{"x": 1}"#), call("b", "{}")]
        );
    }

    #[test]
    fn surrounding_text_is_dropped_when_a_call_is_found() {
        let p = parse("Let me look. {\"name\": \"f\", \"parameters\": {\"q\": 2.0}} done");
        assert_eq!(p.content, None);
        assert_eq!(p.tool_calls, vec![call("f", r#"{"q": 2.0}"#)]);
    }

    #[test]
    fn lookalikes_stay_content() {
        for text in [
            "no braces here",
            "a set {1, 2}",
            r#"{"answer": 42}"#,
            r#"{"name": "f"}"#,
            r#"{"name": 3, "parameters": {}}"#,
            r#"{"name": "f", "parameters": {"deep": {"deeper": {}}}}"#,
            r#"{"name": "f", "parameters": {"s": "a;b"}}"#,
        ] {
            let p = parse(text);
            assert_eq!(p.content.as_deref(), Some(text), "{text}");
            assert!(p.tool_calls.is_empty(), "{text}");
        }
    }
}
