//! The process's logger: `--log-verbose`, `--log-info`, `--log-warning`, `--log-error`,
//! `--log-format` and `--log-file`, changed at run time through Triton's logging extension
//! ([`LogControl`]). Lines go to the log file or stderr. A line that cannot be written
//! (stderr closed, a pipe whose reader exited, a full disk) is counted and dropped:
//! logging never stops the server.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use nereid_core::log_line::LogLine;
use nereid_core::log_settings::{LogControl, LogFormat, LogSettings, LogSink};
use nereid_core::metrics::text::{Family, Kind};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::layer::{Context as LayerContext, Filter, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::cli::Config;

/// Log lines lost because their destination could not take them, for the metrics port.
static LOST_LINES: AtomicU64 = AtomicU64::new(0);

/// Nereid's own counter (Triton has none): log lines dropped because stderr or the log
/// file refused them, so an operator can see that a log shipper went away. Appended to
/// the metrics port.
pub fn render_lost_lines(out: &mut String) {
    let name = "nereid_log_lines_dropped_total";
    let help = "Log lines dropped because stderr or the log file could not take them";
    Family::start(out, name, help, Kind::Counter).sample(&[], &LOST_LINES.load(Ordering::Relaxed));
}

/// Installs the global subscriber with the flags' settings and returns the control the
/// logging extension changes them through. Fails when `--log-file` cannot be opened.
pub fn init(config: &Config) -> anyhow::Result<Arc<LogControl>> {
    let cli = &config.cli;
    let settings = LogSettings {
        file: cli.log_file.clone().unwrap_or_default(),
        info: cli.log_info,
        warning: cli.log_warning,
        error: cli.log_error,
        verbose_level: cli.log_verbose,
        format: config.log_format,
    };
    let file = match &cli.log_file {
        Some(path) if !path.is_empty() => Some(Arc::new(Mutex::new(
            File::options()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("failed to open log file '{path}'"))?,
        ))),
        _ => None,
    };
    let switches = Arc::new(Switches::default());
    switches.set(&settings);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(LogWriter { file })
        // Its fallback report of a failed write goes to stderr with `eprintln!`, which
        // panics when stderr is what failed.
        .log_internal_errors(false)
        .with_ansi(false)
        .event_format(TritonLines {
            switches: switches.clone(),
            escape: escapes_messages(std::env::var(ESCAPE_VARIABLE).ok().as_deref()),
        })
        .with_filter(Levels(switches.clone()));
    tracing_subscriber::registry().with(layer).init();
    Ok(Arc::new(LogControl::new(
        settings,
        Arc::new(ProcessLogger(switches)),
    )))
}

/// Prints a last message to stderr without `eprintln!`'s panic when stderr is closed.
pub fn report(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// The settings the filter and the timer read on every line.
#[derive(Default)]
struct Switches {
    info: AtomicBool,
    warning: AtomicBool,
    error: AtomicBool,
    verbose_level: AtomicU32,
    iso8601: AtomicBool,
}

impl Switches {
    fn set(&self, settings: &LogSettings) {
        self.info.store(settings.info, Ordering::Relaxed);
        self.warning.store(settings.warning, Ordering::Relaxed);
        self.error.store(settings.error, Ordering::Relaxed);
        self.verbose_level
            .store(settings.verbose_level, Ordering::Relaxed);
        self.iso8601
            .store(settings.format == LogFormat::Iso8601, Ordering::Relaxed);
    }

    /// Whether a line at `level` from Nereid's own code is written. Info, warning and
    /// error are switched one by one, as in Triton; verbose levels add debug and trace.
    fn own(&self, level: Level) -> bool {
        match level {
            Level::ERROR => self.error.load(Ordering::Relaxed),
            Level::WARN => self.warning.load(Ordering::Relaxed),
            Level::INFO => self.info.load(Ordering::Relaxed),
            Level::DEBUG => self.verbose_level.load(Ordering::Relaxed) >= 1,
            Level::TRACE => self.verbose_level.load(Ordering::Relaxed) >= 2,
        }
    }
}

/// Applies the logging extension's changes: the switches, then tracing's cached
/// per-callsite answers, which were computed from the old ones.
struct ProcessLogger(Arc<Switches>);

impl LogSink for ProcessLogger {
    fn apply(&self, settings: &LogSettings) {
        self.0.set(settings);
        tracing::callsite::rebuild_interest_cache();
    }
}

/// Nereid's crates (and the C ABI's `tritonserver` target) log by the switches;
/// dependencies only warnings and errors unless verbose logging is on.
struct Levels(Arc<Switches>);

impl<S> Filter<S> for Levels {
    fn enabled(&self, meta: &Metadata<'_>, _: &LayerContext<'_, S>) -> bool {
        let level = *meta.level();
        let target = meta.target();
        let own = target.starts_with("nereid") || target.starts_with("tritonserver");
        if !own && level > Level::WARN && self.0.verbose_level.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.0.own(level)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // The most verbose level any switch lets through, so disabled macros stay cheap.
        [
            Level::TRACE,
            Level::DEBUG,
            Level::INFO,
            Level::WARN,
            Level::ERROR,
        ]
        .into_iter()
        .find(|level| self.0.own(*level))
        .map_or(Some(LevelFilter::OFF), |level| {
            Some(LevelFilter::from_level(level))
        })
    }
}

/// Writes each event as Triton's log line, `I1129 10:00:00.123456 42 serve.rs:7] "text"`
/// (or `--log-format=ISO8601`'s), the text escaped in quotes as Triton escapes messages,
/// so what scripts grep from Triton's log (`^E[0-9]{4}`, `] "message`) is found here.
struct TritonLines {
    switches: Arc<Switches>,
    /// Whether the text is escaped in quotes (see [`escapes_messages`]).
    escape: bool,
}

/// Triton's switch for escaping log messages.
const ESCAPE_VARIABLE: &str = "TRITON_SERVER_ESCAPE_LOG_MESSAGES";

/// Whether messages are escaped given [`ESCAPE_VARIABLE`]'s value: unless it is `0`, as
/// in Triton.
fn escapes_messages(value: Option<&str>) -> bool {
    value != Some("0")
}

impl<S, N> FormatEvent<S, N> for TritonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let format = if self.switches.iso8601.load(Ordering::Relaxed) {
            LogFormat::Iso8601
        } else {
            LogFormat::Default
        };
        let level = event.metadata().level();
        LogLine::of(event).write(&mut writer, level, format, now, self.escape)?;
        writeln!(writer)
    }
}

/// The log file or stderr, where a failed write counts one lost line instead of
/// reporting an error.
#[derive(Clone)]
struct LogWriter {
    file: Option<Arc<Mutex<File>>>,
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // One formatted event is one `write_all`; losing part of it loses the line.
        let written = match &self.file {
            Some(file) => file
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .write_all(buf),
            None => std::io::stderr().write_all(buf),
        };
        if written.is_err() {
            LOST_LINES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_escaped_unless_the_variable_says_0() {
        assert!(escapes_messages(None));
        assert!(escapes_messages(Some("1")));
        assert!(
            escapes_messages(Some("false")),
            "only '0' turns it off, as in Triton"
        );
        assert!(!escapes_messages(Some("0")));
    }

    #[test]
    fn switches_select_levels_one_by_one() {
        let switches = Switches::default();
        switches.set(&LogSettings {
            info: false,
            ..LogSettings::default()
        });
        assert!(switches.own(Level::ERROR) && switches.own(Level::WARN));
        assert!(!switches.own(Level::INFO) && !switches.own(Level::DEBUG));
        let levels = Levels(Arc::new(switches));
        let hint = <Levels as Filter<tracing_subscriber::Registry>>::max_level_hint(&levels);
        assert_eq!(hint, Some(LevelFilter::WARN));
    }
}
