//! [`StreamingToolParser`]: the same parsers fed the generated text piece by piece. Content
//! goes out as soon as it cannot be part of a tool call; text that may be the start of one is
//! held back; a tool call goes out once it is complete (a closed `<tool_call>` block at
//! once, a Llama or Mistral call at [`StreamingToolParser::finish`], since their end is only
//! known then). On well-formed output the pieces add up to what [`super::parse`] returns for
//! the whole text. Where they cannot (a broken call after content or calls already sent), the
//! broken part is sent as content. Like vLLM's streaming `llama3_json`, a Llama text is tool
//! calls only when it starts with `{` or `<|python_tag|>`.

use super::{hermes, llama, mistral, partial_marker_len, Parsed, ToolCallParser};

/// Where the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Llama only: too little text yet to tell content from a call.
    Undecided,
    /// Content, watched for the parser's marker.
    Content,
    /// Inside the tool-call part: buffered (hermes: block by block).
    Calls,
}

/// Incremental tool-call parsing for one streamed generation; owned by the task that streams
/// it.
#[derive(Debug, Clone)]
pub struct StreamingToolParser {
    parser: ToolCallParser,
    phase: Phase,
    /// Text received but neither sent as content nor parsed.
    pending: String,
}

impl StreamingToolParser {
    /// A parser at the start of a generation.
    pub fn new(parser: ToolCallParser) -> Self {
        let phase = match parser {
            ToolCallParser::Llama3Json => Phase::Undecided,
            ToolCallParser::Mistral | ToolCallParser::Hermes => Phase::Content,
        };
        StreamingToolParser {
            parser,
            phase,
            pending: String::new(),
        }
    }

    /// Takes the next piece of generated text; returns the content that can be sent now and
    /// the tool calls completed by it.
    pub fn push(&mut self, piece: &str) -> Parsed {
        self.pending.push_str(piece);
        let mut out = Parsed::default();
        if self.phase == Phase::Undecided {
            self.decide_llama();
        }
        if self.phase == Phase::Content {
            let marker = match self.parser {
                ToolCallParser::Llama3Json => None,
                ToolCallParser::Mistral => Some(mistral::TOOL_CALLS),
                ToolCallParser::Hermes => Some(hermes::OPEN),
            };
            let keep = match marker {
                Some(marker) => match self.pending.find(marker) {
                    Some(at) => {
                        self.phase = Phase::Calls;
                        self.pending.len() - at
                    }
                    None => partial_marker_len(&self.pending, marker),
                },
                None => 0,
            };
            let send = self.pending.len() - keep;
            add_content(&mut out, &self.pending[..send]);
            self.pending.drain(..send);
        }
        if self.phase == Phase::Calls && self.parser == ToolCallParser::Hermes {
            self.hermes_blocks(&mut out);
        }
        out
    }

    /// The end of the generation: parses what was held back and sends the rest.
    pub fn finish(&mut self) -> Parsed {
        let pending = std::mem::take(&mut self.pending);
        let phase = self.phase;
        self.phase = Phase::Content;
        match (phase, self.parser) {
            (Phase::Calls, ToolCallParser::Llama3Json) => llama::parse(&pending),
            (Phase::Calls, ToolCallParser::Mistral) => mistral::parse(&pending),
            (Phase::Calls, ToolCallParser::Hermes) => match pending.find(hermes::OPEN) {
                Some(at) => {
                    let mut out = Parsed::default();
                    match hermes::call_from_block(&pending[at + hermes::OPEN.len()..]) {
                        Some(call) => out.tool_calls.push(call),
                        None => add_content(&mut out, &pending[at..]),
                    }
                    out
                }
                // Text after the last block: dropped, as the whole-text parser drops it.
                None => Parsed::default(),
            },
            _ => Parsed::content(pending),
        }
    }

    /// Llama: a text that starts with `{` or the python tag is tool calls; one that starts
    /// otherwise is content; a prefix of the tag waits.
    fn decide_llama(&mut self) {
        if self.pending.starts_with('{') || self.pending.starts_with(llama::PYTHON_TAG) {
            self.phase = Phase::Calls;
        } else if !self.pending.is_empty() && !llama::PYTHON_TAG.starts_with(&self.pending) {
            self.phase = Phase::Content;
        }
    }

    /// Hermes: sends each closed block's call; drops text outside blocks, keeping what may
    /// start the next block.
    fn hermes_blocks(&mut self, out: &mut Parsed) {
        loop {
            let Some(start) = self.pending.find(hermes::OPEN) else {
                let keep = partial_marker_len(&self.pending, hermes::OPEN);
                self.pending.drain(..self.pending.len() - keep);
                return;
            };
            let body = start + hermes::OPEN.len();
            let Some(end) = self.pending[body..].find(hermes::CLOSE) else {
                self.pending.drain(..start);
                return;
            };
            let after = body + end + hermes::CLOSE.len();
            match hermes::call_from_block(&self.pending[body..body + end]) {
                Some(call) => out.tool_calls.push(call),
                None => add_content(out, &self.pending[start..after]),
            }
            self.pending.drain(..after);
        }
    }
}

/// Appends `text` to the content of `out`.
fn add_content(out: &mut Parsed, text: &str) {
    if !text.is_empty() {
        out.content.get_or_insert_with(String::new).push_str(text);
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    /// Streams `text` in pieces cut at `cuts` (byte offsets on char boundaries) and adds up
    /// the output.
    fn stream(parser: ToolCallParser, text: &str, cuts: &[usize]) -> Parsed {
        let mut p = StreamingToolParser::new(parser);
        let mut total = Parsed::default();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&text.len())) {
            merge(&mut total, p.push(&text[from..cut]));
            from = cut;
        }
        merge(&mut total, p.finish());
        total
    }

    fn merge(total: &mut Parsed, part: Parsed) {
        if let Some(c) = part.content {
            add_content(total, &c);
        }
        total.tool_calls.extend(part.tool_calls);
    }

    /// Every way to cut `text` in two and in three pieces (and one piece per char) gives
    /// the whole-text result.
    fn check_all_splits(parser: ToolCallParser, text: &str) {
        let whole = parse(parser, text);
        let bounds: Vec<usize> = (1..text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        assert_eq!(stream(parser, text, &[]), whole, "one piece: {text}");
        assert_eq!(stream(parser, text, &bounds), whole, "char by char: {text}");
        for &a in &bounds {
            assert_eq!(stream(parser, text, &[a]), whole, "cut at {a}: {text}");
            for &b in bounds.iter().filter(|&&b| b > a).step_by(3) {
                assert_eq!(stream(parser, text, &[a, b]), whole, "cuts {a},{b}: {text}");
            }
        }
    }

    #[test]
    fn hermes_pieces_add_up() {
        for text in [
            "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>\n",
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
            "I use <tool and <tool_cal but no call. Also </tool_call>.",
            "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> trailing words",
        ] {
            check_all_splits(ToolCallParser::Hermes, text);
        }
    }

    #[test]
    fn mistral_pieces_add_up() {
        for text in [
            "[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 3.5, \"b\": 4}}]",
            "Let me add. [TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}]",
            "Arrays like [TOOL] or [TOOL_CALL are not markers.",
        ] {
            check_all_splits(ToolCallParser::Mistral, text);
        }
    }

    #[test]
    fn llama_pieces_add_up() {
        for text in [
            "{\"name\": \"f\", \"parameters\": {\"x\": \"é\"}}",
            "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": [1, 2]}}",
            "Plain answer, no call.",
            "<|python is not the tag",
            "{\"answer\": \"just json\"}",
        ] {
            check_all_splits(ToolCallParser::Llama3Json, text);
        }
    }

    #[test]
    fn content_is_not_held_longer_than_needed() {
        let mut p = StreamingToolParser::new(ToolCallParser::Hermes);
        assert_eq!(p.push("Hello <to").content.as_deref(), Some("Hello "));
        assert_eq!(p.push("y>").content.as_deref(), Some("<toy>"));
        let call = p.push("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
        assert_eq!(call.content, None);
        assert_eq!(call.tool_calls.len(), 1, "sent when its block closes");
        assert_eq!(p.finish(), Parsed::default());

        let mut p = StreamingToolParser::new(ToolCallParser::Llama3Json);
        assert_eq!(p.push("<|py").content, None, "may be the python tag");
        assert_eq!(p.push("lon").content.as_deref(), Some("<|pylon"));
        assert_eq!(p.push(" rocks").content.as_deref(), Some(" rocks"));
    }

    #[test]
    fn a_broken_block_after_sent_content_becomes_content() {
        let text = "Sure <tool_call>{broken}</tool_call>";
        let streamed = stream(ToolCallParser::Hermes, text, &[3, 12]);
        assert_eq!(streamed.content.as_deref(), Some(text));
        assert!(streamed.tool_calls.is_empty());
    }
}
