//! The one-line progress indicator the load loops update while a step runs.

use std::io::{IsTerminal, Write as _};

use parking_lot::Mutex;

/// The one-line progress indicator, rewritten in place with `\r`. Shown only when stderr
/// is a terminal and `--quiet` is off, so logs and pipes stay clean.
pub struct Progress {
    enabled: bool,
    /// Length of the line on screen, to blank out leftovers of a longer previous line.
    shown: Mutex<usize>,
}

impl Progress {
    /// A progress line that shows unless `quiet` or stderr is not a terminal.
    pub fn new(quiet: bool) -> Self {
        Self {
            enabled: !quiet && std::io::stderr().is_terminal(),
            shown: Mutex::new(0),
        }
    }

    /// Replaces the line with `message`.
    pub fn show(&self, message: &str) {
        if !self.enabled {
            return;
        }
        let mut shown = self.shown.lock();
        let pad = shown.saturating_sub(message.chars().count());
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not stop the benchmark.
        let _ = write!(err, "\r{message}{:pad$}", "");
        let _ = err.flush();
        *shown = message.chars().count();
    }

    /// Erases the line.
    pub fn clear(&self) {
        if !self.enabled {
            return;
        }
        let mut shown = self.shown.lock();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{:width$}\r", "", width = *shown);
        let _ = err.flush();
        *shown = 0;
    }
}
