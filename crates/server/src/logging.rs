//! Log setup from `--log-verbose`, `--log-info`, `--log-warning`, `--log-error` and
//! `--log-format`; logs go to stderr. A log line that cannot be written (stderr closed,
//! a pipe whose reader exited) is counted and dropped: logging never stops the server.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::cli::{Config, LogFormat};

/// Log lines lost because stderr could not take them, for the metrics port.
static LOST_LINES: AtomicU64 = AtomicU64::new(0);

/// How many log lines were dropped so far because stderr refused them.
pub fn lost_lines() -> u64 {
    LOST_LINES.load(Ordering::Relaxed)
}

/// Nereid's own counter (Triton has none): log lines dropped because stderr refused them,
/// so an operator can see that a log shipper went away. Appended to the metrics port.
pub fn render_lost_lines(out: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "# HELP nereid_log_lines_dropped_total Log lines dropped because stderr could not take them"
    );
    let _ = writeln!(out, "# TYPE nereid_log_lines_dropped_total counter");
    let _ = writeln!(out, "nereid_log_lines_dropped_total {}", lost_lines());
}

/// Installs the global subscriber.
pub fn init(config: &Config) {
    let cli = &config.cli;
    let level = if cli.log_verbose > 1 {
        "trace"
    } else if cli.log_verbose == 1 {
        "debug"
    } else if cli.log_info {
        "info"
    } else if cli.log_warning {
        "warn"
    } else if cli.log_error {
        "error"
    } else {
        "off"
    };
    // Dependencies stay at warnings unless verbose logging is on.
    let deps = if cli.log_verbose > 0 { level } else { "warn" };
    let filter = EnvFilter::new(format!(
        "{deps},nereid={level},nereid_core={level},nereid_http={level},nereid_grpc={level},nereid_backend_onnx={level},nereid_embed={level},tritonserver={level}"
    ));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(LossyStderr)
        // Its fallback report of a failed write goes to stderr with `eprintln!`, which
        // panics when stderr is what failed.
        .log_internal_errors(false)
        .with_ansi(false)
        .with_target(false);
    match config.log_format {
        LogFormat::Default => builder.compact().init(),
        LogFormat::Iso8601 => builder.init(),
    }
}

/// Prints a last message to stderr without `eprintln!`'s panic when stderr is closed.
pub fn report(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// stderr, where a failed write counts one lost line instead of reporting an error.
struct LossyStderr;

impl<'a> MakeWriter<'a> for LossyStderr {
    type Writer = LossyStderr;

    fn make_writer(&'a self) -> Self::Writer {
        LossyStderr
    }
}

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // One formatted event is one `write_all`; losing part of it loses the line.
        if std::io::stderr().write_all(buf).is_err() {
            LOST_LINES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
