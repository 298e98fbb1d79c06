//! Tool calls in generated text, found as vLLM's parsers of the same names find them
//! (`--tool-call-parser llama3_json | mistral | hermes`), for a whole text ([`parse`]) or
//! piece by piece while streaming ([`StreamingToolParser`]). Text that is not a tool call
//! stays content; a tool call that does not parse leaves the text as content, as in vLLM.

mod hermes;
mod llama;
mod mistral;
mod stream;

pub use stream::StreamingToolParser;

use crate::pyjson::{dumps, DumpOptions};
use serde_json::Value;

/// A `--tool-call-parser` name: which format the model writes its tool calls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolCallParser {
    /// Llama 3.x: `{"name": ..., "parameters": {...}}`, maybe after `<|python_tag|>`, several
    /// separated by `;`.
    Llama3Json,
    /// Mistral: `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`.
    Mistral,
    /// Hermes / Qwen 2.5: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.
    Hermes,
}

impl ToolCallParser {
    /// Every parser, for help texts and errors.
    pub const ALL: [ToolCallParser; 3] = [
        ToolCallParser::Llama3Json,
        ToolCallParser::Mistral,
        ToolCallParser::Hermes,
    ];

    /// The flag's spelling (vLLM's name).
    pub fn name(self) -> &'static str {
        match self {
            ToolCallParser::Llama3Json => "llama3_json",
            ToolCallParser::Mistral => "mistral",
            ToolCallParser::Hermes => "hermes",
        }
    }
}

impl std::fmt::Display for ToolCallParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A `--tool-call-parser` value that names no parser.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool call parser {0:?}; known parsers: llama3_json, mistral, hermes")]
pub struct UnknownToolCallParser(pub String);

impl std::str::FromStr for ToolCallParser {
    type Err = UnknownToolCallParser;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ToolCallParser::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownToolCallParser(s.to_owned()))
    }
}

/// One tool call, as the OpenAI API returns it (`function.name`, `function.arguments`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// The arguments as JSON text (written as vLLM writes them, Python's `json.dumps`).
    pub arguments: String,
}

/// What a text (or a streamed piece) holds: content for the client and the tool calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Text that is not a tool call; `None` when there is none.
    pub content: Option<String>,
    /// Tool calls, in the order written.
    pub tool_calls: Vec<ToolCall>,
}

impl Parsed {
    /// All of `text` as content.
    fn content(text: impl Into<String>) -> Self {
        let text = text.into();
        Parsed {
            content: (!text.is_empty()).then_some(text),
            tool_calls: Vec::new(),
        }
    }
}

/// Parses a whole generated text as vLLM's parser of that name does (text that is not a tool
/// call stays content).
pub fn parse(parser: ToolCallParser, text: &str) -> Parsed {
    match parser {
        ToolCallParser::Llama3Json => llama::parse(text),
        ToolCallParser::Mistral => mistral::parse(text),
        ToolCallParser::Hermes => hermes::parse(text),
    }
}

/// A tool call from a parsed JSON object: a string `name` and the arguments under the first
/// of `argument_keys` present, written as `json.dumps(arguments, ensure_ascii=...)`. `None`
/// when either is missing, where vLLM's `obj["name"]` would raise.
fn call_from_object(obj: &Value, argument_keys: &[&str], ensure_ascii: bool) -> Option<ToolCall> {
    let name = obj.as_object()?.get("name")?.as_str()?;
    let arguments = argument_keys.iter().find_map(|k| obj.get(*k))?;
    Some(ToolCall {
        name: name.to_owned(),
        arguments: dumps(arguments, &DumpOptions::python(ensure_ascii)),
    })
}

/// How many bytes at the end of `text` could be the start of `marker` (held back while
/// streaming until the next piece tells). Markers are ASCII, so the cut is a char boundary.
fn partial_marker_len(text: &str, marker: &str) -> usize {
    (1..marker.len())
        .rev()
        .find(|&k| text.ends_with(&marker[..k]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in ToolCallParser::ALL {
            assert_eq!(p.name().parse::<ToolCallParser>().unwrap(), p);
        }
        let e = "pythonic".parse::<ToolCallParser>().unwrap_err();
        assert!(
            e.to_string().contains("llama3_json, mistral, hermes"),
            "{e}"
        );
    }

    #[test]
    fn partial_markers() {
        assert_eq!(partial_marker_len("abc<tool_", "<tool_call>"), 6);
        assert_eq!(partial_marker_len("abc<", "<tool_call>"), 1);
        assert_eq!(partial_marker_len("abc", "<tool_call>"), 0);
        assert_eq!(partial_marker_len("é[TOOL", "[TOOL_CALLS]"), 5);
    }
}
