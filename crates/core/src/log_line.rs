//! One log record as Triton's logger writes it: `I1129 10:00:00.123456 42 file.rs:7] text`
//! (or ISO 8601's `2026-11-29T10:00:00Z I 42 file.rs:7] text`), where the text is the
//! event's message followed by ` name=value` for each of its other fields. Shared by the
//! binary's logger and the in-process library's, so both write the lines Triton's QA
//! scripts grep (`^E[0-9]{4}`, `] "message`).

use std::fmt::Write as _;
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Level};

use crate::log_settings::LogFormat;

/// The parts of one record: where it was logged and what it says.
#[derive(Debug, Default)]
pub struct LogLine {
    /// The source file's base name (a plugin's own, when it logs through
    /// `TRITONSERVER_LogMessage`, which passes `file` and `line` as fields).
    pub file: String,
    /// The source line.
    pub line: i32,
    /// The message, then ` name=value` for every other field.
    pub text: String,
    /// A table (an event with the field `table = true`): written as it is, never
    /// escaped, after a line break, as Triton writes its start-up tables.
    pub table: bool,
}

impl LogLine {
    /// The record of `event`.
    pub fn of(event: &Event<'_>) -> Self {
        let mut line = LogLine::default();
        let mut visitor = Fields {
            line: &mut line,
            file_given: false,
        };
        event.record(&mut visitor);
        let metadata = event.metadata();
        if line.file.is_empty() {
            line.file = metadata.file().unwrap_or_default().to_owned();
        }
        if let Some(base) = line.file.rsplit('/').next() {
            line.file = base.to_owned();
        }
        if line.line == 0 {
            line.line = metadata
                .line()
                .and_then(|l| i32::try_from(l).ok())
                .unwrap_or(0);
        }
        line
    }

    /// Writes the line (without its newline) at `level` stamped `since_epoch`; with
    /// `escape`, the text as a JSON string in quotes, as Triton has escaped messages
    /// since 2.47 (so a message with a newline stays one line).
    pub fn write(
        &self,
        out: &mut impl std::fmt::Write,
        level: &Level,
        format: LogFormat,
        since_epoch: Duration,
        escape: bool,
    ) -> std::fmt::Result {
        let letter = match *level {
            Level::ERROR => 'E',
            Level::WARN => 'W',
            _ => 'I',
        };
        let pid = std::process::id();
        match format {
            LogFormat::Default => {
                out.write_char(letter)?;
                format.write_stamp(out, since_epoch)?;
                write!(out, " {pid} {}:{}] ", self.file, self.line)?;
            }
            LogFormat::Iso8601 => {
                format.write_stamp(out, since_epoch)?;
                write!(out, " {letter} {pid} {}:{}] ", self.file, self.line)?;
            }
        }
        if escape && !self.table {
            let quoted = serde_json::to_string(&self.text).map_err(|_| std::fmt::Error)?;
            out.write_str(&quoted)
        } else {
            out.write_str(&self.text)
        }
    }
}

/// Collects an event's fields into a [`LogLine`].
struct Fields<'a> {
    line: &'a mut LogLine,
    file_given: bool,
}

impl Fields<'_> {
    /// The message first, then ` name=value` for every other field.
    fn push(&mut self, name: &str, value: impl std::fmt::Display) {
        let text = &mut self.line.text;
        if name == "message" {
            let rest = std::mem::take(text);
            let _ = write!(text, "{value}{rest}");
        } else {
            let _ = write!(text, " {name}={value}");
        }
    }
}

impl Visit for Fields<'_> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        match field.name() {
            "table" => self.line.table = value,
            name => self.push(name, value),
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "file" if !self.file_given => {
                self.line.file = value.to_owned();
                self.file_given = true;
            }
            name => self.push(name, value),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            "line" => self.line.line = i32::try_from(value).unwrap_or(0),
            name => self.push(name, value),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "file" if !self.file_given => {
                self.line.file = format!("{value:?}");
                self.file_given = true;
            }
            name => self.push(name, format_args!("{value:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(line: &LogLine, level: &Level, format: LogFormat, escape: bool) -> String {
        let mut out = String::new();
        // 2026-11-29T10:00:00.000042Z
        let now = Duration::new(1_795_946_400, 42_000);
        line.write(&mut out, level, format, now, escape)
            .expect("written");
        out
    }

    #[test]
    fn lines_have_tritons_preamble_and_escaped_text() {
        let line = LogLine {
            file: "serve.rs".into(),
            line: 7,
            text: "say \"hi\"\nthen go model=m".into(),
            table: false,
        };
        let pid = std::process::id();
        assert_eq!(
            written(&line, &Level::ERROR, LogFormat::Default, true),
            format!(r#"E1129 10:00:00.000042 {pid} serve.rs:7] "say \"hi\"\nthen go model=m""#)
        );
        assert_eq!(
            written(&line, &Level::DEBUG, LogFormat::Iso8601, false),
            format!("2026-11-29T10:00:00Z I {pid} serve.rs:7] say \"hi\"\nthen go model=m")
        );
        // A table is never escaped: its lines are the log's lines.
        let table = LogLine {
            text: "\n+---+\n| \"a\" |".into(),
            table: true,
            ..line
        };
        assert_eq!(
            written(&table, &Level::INFO, LogFormat::Default, true),
            format!("I1129 10:00:00.000042 {pid} serve.rs:7] \n+---+\n| \"a\" |")
        );
    }
}
