//! OpenAI messages as chat templates expect them. Templates (Llama 3.1, Qwen 2.5, Mistral)
//! print a tool call's arguments with `tojson`, expecting an object, while the OpenAI API
//! sends them as JSON text; like vLLM (`chat_utils._postprocess_messages`), assistant tool
//! calls whose `function.arguments` is JSON text get the parsed value instead. Everything
//! else passes through untouched, as `transformers.apply_chat_template` takes it.

use serde_json::Value;
use std::borrow::Cow;

/// The messages with assistant tool-call arguments parsed; borrowed when nothing changes.
pub(crate) fn prepare(messages: &[Value]) -> Cow<'_, [Value]> {
    if !messages.iter().any(needs_parse) {
        return Cow::Borrowed(messages);
    }
    let mut owned = messages.to_vec();
    for message in owned.iter_mut().filter(|m| needs_parse(m)) {
        let Some(Value::Array(calls)) = message.get_mut("tool_calls") else {
            continue;
        };
        for call in calls {
            if let Some(arguments) = call
                .get_mut("function")
                .and_then(|f| f.get_mut("arguments"))
            {
                if let Some(parsed) = parse_text(arguments) {
                    *arguments = parsed;
                }
            }
        }
    }
    Cow::Owned(owned)
}

/// Whether `message` is an assistant message with at least one argument string to parse.
fn needs_parse(message: &Value) -> bool {
    message.get("role").and_then(Value::as_str) == Some("assistant")
        && message
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|calls| {
                calls.iter().any(|c| {
                    c.get("function")
                        .and_then(|f| f.get("arguments"))
                        .is_some_and(|a| parse_text(a).is_some())
                })
            })
}

/// The JSON value a string holds; `None` for non-strings and text that is not JSON (left as
/// text, for the template to print).
fn parse_text(v: &Value) -> Option<Value> {
    serde_json::from_str(v.as_str()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn assistant_argument_text_becomes_json() {
        let messages = vec![
            json!({"role": "user", "content": "{\"not\": \"touched\"}"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [2]}"}},
                {"id": "2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
                {"id": "3", "type": "function", "function": {"name": "h", "arguments": {"x": 1}}}
            ]}),
        ];
        let out = prepare(&messages);
        assert!(matches!(out, Cow::Owned(_)));
        assert_eq!(out[0], messages[0]);
        let calls = out[1]["tool_calls"].as_array().unwrap();
        assert_eq!(calls[0]["function"]["arguments"], json!({"b": 1, "a": [2]}));
        assert_eq!(
            serde_json::to_string(&calls[0]["function"]["arguments"]).unwrap(),
            r#"{"b":1,"a":[2]}"#,
            "key order kept"
        );
        assert_eq!(calls[1]["function"]["arguments"], json!("not json"));
        assert_eq!(calls[2]["function"]["arguments"], json!({"x": 1}));
    }

    #[test]
    fn nothing_to_do_borrows() {
        let messages = vec![json!({"role": "user", "content": "hi"})];
        assert!(matches!(prepare(&messages), Cow::Borrowed(_)));
    }
}
