//! Stop strings, enforced on the text the model returns: the text ends before the first
//! stop string and the choice's `finish_reason` is `stop`, whether or not the model
//! honoured `stop` itself (vLLM does; a model of the TensorRT-LLM convention without
//! `stop_words`, or a Python model, may not). While streaming, text that could be the
//! start of a stop string is held back until the next piece decides.

/// The stop strings of one choice and the text held back.
#[derive(Debug, Default)]
pub struct StopScanner {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopScanner {
    /// A scanner for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            ..Self::default()
        }
    }

    /// Whether a stop string was found; everything after it is dropped.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Feeds the next `text`; returns what may be sent now.
    pub fn push(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        if self.stops.is_empty() {
            return text.to_string();
        }
        self.held.push_str(text);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.stopped = true;
            let mut out = std::mem::take(&mut self.held);
            out.truncate(at);
            return out;
        }
        let keep = self.partial_suffix();
        let cut = self.held.len() - keep;
        let rest = self.held.split_off(cut);
        std::mem::replace(&mut self.held, rest)
    }

    /// The text still held back, once the model has finished.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// The length of the longest end of the held text that begins some stop string.
    fn partial_suffix(&self) -> usize {
        let held = self.held.as_str();
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        (1..=longest.min(held.len()))
            .rev()
            .filter(|n| held.is_char_boundary(held.len() - n))
            .find(|n| {
                let tail = &held[held.len() - n..];
                self.stops
                    .iter()
                    .any(|s| s.len() > *n && s.starts_with(tail))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut scanner = StopScanner::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for piece in pieces {
            out.push_str(&scanner.push(piece));
        }
        out.push_str(&scanner.finish());
        (out, scanner.stopped())
    }

    #[test]
    fn text_ends_before_the_first_stop_string() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D world"]),
            ("hello ".into(), true)
        );
        assert_eq!(run(&["b", "a"], &["xxab"]), ("xx".into(), true));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn a_partial_match_is_held_then_released() {
        let mut scanner = StopScanner::new(vec!["STOP".into()]);
        assert_eq!(scanner.push("go ST"), "go ");
        assert_eq!(scanner.push("ART"), "START");
        assert_eq!(scanner.push("é S"), "é ");
        assert_eq!(scanner.finish(), "S");
        assert!(!scanner.stopped());
    }

    #[test]
    fn multibyte_text_is_never_split() {
        assert_eq!(run(&["éé"], &["aé", "b"]), ("aéb".into(), false));
        assert_eq!(run(&["🙂!"], &["x🙂", "!y"]), ("x".into(), true));
    }
}
