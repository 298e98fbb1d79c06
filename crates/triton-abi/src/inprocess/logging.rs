//! Where the in-process server's log records go, as Triton's logger sends them: to the
//! program's `TRITONSERVER_ServerOptionsSetLogCallback` callback as fields (Triton's
//! level, file, line, a timestamp and the raw message; Triton's Python `tritonserver`
//! package and Dynamo route them into their own logging), or else as Triton's log lines
//! to `SetLogFile`'s file or stderr, stamped in `SetLogFormat`'s format. `SetLogInfo`,
//! `SetLogWarn`, `SetLogError` and `SetLogVerbose` choose the records either way.
//!
//! Nereid logs through `tracing`. `TRITONSERVER_ServerNew` installs, once per process, a
//! small subscriber that ignores spans and hands each enabled event to the destination of
//! the options the newest server was started with.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nereid_core::log_line::LogLine;
use nereid_core::log_settings::LogFormat;
use parking_lot::{Mutex, RwLock};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

use crate::log::level;

/// `TRITONSERVER_LogCallbackFn_t`: level, file name, line, timestamp in microseconds
/// since the epoch, message, and the user pointer given with the callback.
pub type LogCallbackFn = unsafe extern "C" fn(
    level: u32,
    filename: *const c_char,
    line: i32,
    timestamp_us: u64,
    message: *const c_char,
    userp: *mut c_void,
);

/// A callback and the user pointer it is called with.
#[derive(Clone, Copy)]
pub(crate) struct LogCallback {
    function: LogCallbackFn,
    userp: *mut c_void,
}

// SAFETY: Triton's contract for the callback is that it may be called from any thread
// with its user pointer; the pointer is only passed back, never dereferenced here.
unsafe impl Send for LogCallback {}
// SAFETY: as above; the value is two plain pointers read by every logging thread.
unsafe impl Sync for LogCallback {}

/// The log settings of a server's options: the switches (`SetLogInfo`, `SetLogWarn`,
/// `SetLogError`, `SetLogVerbose`) and the destination (`SetLogCallback`, else
/// `SetLogFile` or stderr, in `SetLogFormat`).
#[derive(Clone)]
pub(crate) struct LogOptions {
    pub(crate) info: bool,
    pub(crate) warn: bool,
    pub(crate) error: bool,
    pub(crate) verbose: i32,
    pub(crate) callback: Option<LogCallback>,
    pub(crate) file: Option<PathBuf>,
    pub(crate) format: LogFormat,
}

impl Default for LogOptions {
    /// Triton's defaults: info, warnings and errors on, verbose off, no callback, lines
    /// to stderr in the default format.
    fn default() -> Self {
        Self {
            info: true,
            warn: true,
            error: true,
            verbose: 0,
            callback: None,
            file: None,
            format: LogFormat::Default,
        }
    }
}

impl LogOptions {
    /// Triton's level for a `tracing` level, when that level is switched on: debug is
    /// verbose level 1 and trace level 2.
    fn triton_level(&self, at: Level) -> Option<u32> {
        let (on, raw) = match at {
            Level::ERROR => (self.error, level::ERROR),
            Level::WARN => (self.warn, level::WARN),
            Level::INFO => (self.info, level::INFO),
            Level::DEBUG => (self.verbose >= 1, level::VERBOSE),
            Level::TRACE => (self.verbose >= 2, level::VERBOSE),
        };
        on.then_some(raw)
    }
}

/// `TRITONSERVER_ServerOptionsSetLogCallback`'s arguments as the options keep them: a
/// null function clears the callback.
pub(crate) fn callback(function: Option<LogCallbackFn>, userp: *mut c_void) -> Option<LogCallback> {
    function.map(|function| LogCallback { function, userp })
}

/// Where the records of the newest server go.
struct Destination {
    options: LogOptions,
    sink: Sink,
}

/// The callback, or a writer of Triton's log lines.
enum Sink {
    Callback(LogCallback),
    // Locked for one line at a time, so lines from several threads never interleave.
    Lines(Mutex<Box<dyn std::io::Write + Send>>),
}

/// What the process's subscriber delivers to; `None` until the first server starts.
static CURRENT: RwLock<Option<Arc<Destination>>> = RwLock::new(None);

/// Makes `options` the process's log destination (each log setter of the server options
/// and `TRITONSERVER_ServerNew` call it, as Triton's setters change its one logger),
/// installing the subscriber on first use; fails when the log file cannot be opened. A
/// program that already installed its own `tracing` subscriber keeps it, and a warning
/// says the server's records go there instead.
pub(crate) fn install(options: &LogOptions) -> Result<(), String> {
    let sink = match (options.callback, &options.file) {
        (Some(callback), _) => Sink::Callback(callback),
        (None, Some(path)) => {
            let file = File::options()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("failed to open log file '{}': {e}", path.display()))?;
            Sink::Lines(Mutex::new(Box::new(file)))
        }
        (None, None) => Sink::Lines(Mutex::new(Box::new(std::io::stderr()))),
    };
    *CURRENT.write() = Some(Arc::new(Destination {
        options: options.clone(),
        sink,
    }));
    static INSTALLED: AtomicBool = AtomicBool::new(false);
    if !INSTALLED.swap(true, Ordering::AcqRel)
        && tracing::subscriber::set_global_default(CallbackSubscriber::default()).is_err()
    {
        tracing::warn!(
            "a tracing subscriber was already installed: the server's log records go to it"
        );
    }
    Ok(())
}

/// The subscriber: events only, each checked against the current options.
#[derive(Default)]
struct CallbackSubscriber {
    /// Span ids handed out; spans are not recorded, but ids must be non-zero and distinct.
    next_span: AtomicU64,
}

thread_local! {
    /// Set while this thread runs the callback, so a callback that logs back through
    /// `TRITONSERVER_LogMessage` does not recurse.
    static IN_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Subscriber for CallbackSubscriber {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        // The switches change with each new server: ask every time.
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        // Events, and the hints `tracing::enabled!` asks with (`TRITONSERVER_LogIsEnabled`):
        // everything but spans, which are not recorded.
        !metadata.is_span()
            && CURRENT
                .read()
                .as_ref()
                .is_some_and(|d| d.options.triton_level(*metadata.level()).is_some())
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let Some(destination) = CURRENT.read().clone() else {
            return;
        };
        let Some(raw_level) = destination.options.triton_level(*event.metadata().level()) else {
            return;
        };
        if IN_CALLBACK.with(|flag| flag.replace(true)) {
            return;
        }
        let record = LogRecord::of(event);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        match &destination.sink {
            Sink::Callback(callback) => {
                let timestamp_us = u64::try_from(now.as_micros()).unwrap_or(u64::MAX);
                // SAFETY: the callback the program registered, with NUL-terminated strings
                // that live for the call and the program's own user pointer.
                unsafe {
                    (callback.function)(
                        raw_level,
                        record.file.as_ptr(),
                        record.line,
                        timestamp_us,
                        record.message.as_ptr(),
                        callback.userp,
                    )
                };
            }
            Sink::Lines(writer) => {
                let line = record.line_text(raw_level, destination.options.format, now);
                // A line that cannot be written is dropped: logging never stops the server.
                let _ = writer.lock().write_all(line.as_bytes());
            }
        }
        IN_CALLBACK.with(|flag| flag.set(false));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// One event as Triton's logger hands it over: the file's base name (as Triton's log
/// lines show it), the line, and the message with the event's other fields after it.
struct LogRecord {
    file: CString,
    line: i32,
    message: CString,
    /// The same, for writing as a line.
    parts: LogLine,
}

impl LogRecord {
    /// Triton's log line (see [`LogLine`]); verbose lines are `I`. The text is written as
    /// given, as the in-process library has always written it.
    fn line_text(&self, level: u32, format: LogFormat, now: Duration) -> String {
        let level = match level {
            level::ERROR => Level::ERROR,
            level::WARN => Level::WARN,
            _ => Level::INFO,
        };
        let mut line = String::new();
        let _ = self.parts.write(&mut line, &level, format, now, false);
        line.push('\n');
        line
    }

    fn of(event: &Event<'_>) -> Self {
        let parts = LogLine::of(event);
        Self {
            file: c_text(parts.file.clone()),
            line: parts.line,
            message: c_text(parts.text.clone()),
            parts,
        }
    }
}

/// `text` as a C string, any NUL byte in it replaced.
fn c_text(text: String) -> CString {
    CString::new(text).unwrap_or_else(|e| {
        let cleaned = String::from_utf8_lossy(&e.into_vec()).replace('\0', " ");
        CString::new(cleaned).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::sync::Arc;

    /// What the test callback received: (level, file, line, timestamp, message).
    type Received = parking_lot::Mutex<Vec<(u32, String, i32, u64, String)>>;

    unsafe extern "C" fn collect(
        level: u32,
        filename: *const c_char,
        line: i32,
        timestamp_us: u64,
        message: *const c_char,
        userp: *mut c_void,
    ) {
        // SAFETY: the test passes a `Received` that outlives its use here, and the
        // strings are NUL-terminated for the call.
        unsafe {
            let received = &*(userp as *const Received);
            received.lock().push((
                level,
                CStr::from_ptr(filename).to_string_lossy().into_owned(),
                line,
                timestamp_us,
                CStr::from_ptr(message).to_string_lossy().into_owned(),
            ));
        }
    }

    #[test]
    fn records_reach_the_callback_as_the_switches_allow() {
        let received: Arc<Received> = Arc::default();
        let options = LogOptions {
            info: false,
            verbose: 1,
            callback: callback(Some(collect), Arc::as_ptr(&received) as *mut c_void),
            ..LogOptions::default()
        };
        install(&options).expect("installed");
        // The switches answer `TRITONSERVER_LogIsEnabled` too.
        assert!(!crate::log::TRITONSERVER_LogIsEnabled(level::INFO));
        assert!(crate::log::TRITONSERVER_LogIsEnabled(level::WARN));
        assert!(crate::log::TRITONSERVER_LogIsEnabled(level::VERBOSE));
        tracing::info!("switched off");
        tracing::warn!(model = "m", "a warning");
        tracing::debug!("verbose level 1");
        tracing::trace!("verbose level 2: off");
        // SAFETY: static NUL-terminated strings.
        let error = unsafe {
            crate::log::TRITONSERVER_LogMessage(
                level::ERROR,
                c"/src/backend/model.cc".as_ptr(),
                42,
                c"from a plugin".as_ptr(),
            )
        };
        assert!(error.is_null());
        // Without a callback, Triton's lines go to the log file.
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("server.log");
        let lines = LogOptions {
            file: Some(file.clone()),
            format: LogFormat::Iso8601,
            ..LogOptions::default()
        };
        install(&lines).expect("installed");
        tracing::warn!("after the callback was cleared");
        install(&LogOptions::default()).expect("installed");
        let this_file = file!().rsplit('/').next().unwrap_or_default().to_owned();
        // Other tests of this crate may log meanwhile; keep this test's records.
        let received: Vec<_> = received
            .lock()
            .iter()
            .filter(|r| r.1 == this_file || r.1 == "model.cc")
            .cloned()
            .collect();
        assert_eq!(received.len(), 3, "{received:?}");
        assert!(
            received.iter().all(|r| r.3 > 1_600_000_000_000_000),
            "microseconds since the epoch"
        );
        assert_eq!(
            (received[0].0, received[0].4.as_str()),
            (level::WARN, "a warning model=m")
        );
        assert!(received[0].2 > 0, "the line of the tracing call");
        assert_eq!(
            (received[1].0, received[1].4.as_str()),
            (level::VERBOSE, "verbose level 1")
        );
        assert_eq!(
            (received[2].0, received[2].1.as_str(), received[2].2),
            (level::ERROR, "model.cc", 42)
        );
        assert_eq!(received[2].4, "from a plugin");
        let text = std::fs::read_to_string(&file).expect("the log file");
        let line = text
            .lines()
            .find(|l| l.ends_with("] after the callback was cleared"))
            .expect("the warning's line");
        // `2026-11-28T17:00:00Z W <pid> logging.rs:<line>] ...`
        let fields: Vec<&str> = line.splitn(4, ' ').collect();
        assert!(fields[0].ends_with('Z') && fields[0].len() == 20, "{line}");
        assert_eq!(fields[1], "W");
        assert_eq!(fields[2], std::process::id().to_string());
        assert!(fields[3].starts_with(&format!("{this_file}:")), "{line}");
    }
}
