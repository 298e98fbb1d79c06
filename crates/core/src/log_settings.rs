//! Triton's logging extension (HTTP `/v2/logging`, gRPC `LogSettings`): the process's log
//! settings, read and changed while it serves. The core keeps the settings and checks
//! every change; whoever owns the process's logger applies them through a [`LogSink`],
//! so the frontends need no knowledge of how logs are written.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::Error;

/// How each log line is stamped (`--log-format`, setting `log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Triton's `default`: a glog-style stamp.
    Default,
    /// Triton's `ISO8601`: an ISO 8601 UTC timestamp.
    Iso8601,
}

impl LogFormat {
    /// The format Triton spells `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::Default),
            "ISO8601" => Some(Self::Iso8601),
            _ => None,
        }
    }

    /// Triton's name, as the settings report it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Iso8601 => "ISO8601",
        }
    }

    /// Writes the stamp of a line logged `since_epoch` after 1970, in UTC: `default` is
    /// glog's `MMDD hh:mm:ss.uuuuuu`, as Triton's lines start; `ISO8601` is
    /// `YYYY-MM-DDThh:mm:ssZ`. Shared by the binary's logger and the in-process library's.
    pub fn write_stamp(
        self,
        out: &mut impl std::fmt::Write,
        since_epoch: std::time::Duration,
    ) -> std::fmt::Result {
        let secs = since_epoch.as_secs();
        let (year, month, day) = civil_date(secs / 86_400);
        let (hour, minute, second) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
        match self {
            Self::Iso8601 => write!(
                out,
                "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"
            ),
            Self::Default => {
                let micros = since_epoch.subsec_micros();
                write!(
                    out,
                    "{month:02}{day:02} {hour:02}:{minute:02}:{second:02}.{micros:06}"
                )
            }
        }
    }
}

/// The proleptic Gregorian (year, month, day) of a count of days since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The settings Triton reports, with its names in the field docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// `log_file`: where logs go; empty for stderr. Fixed at start-up (`--log-file`).
    pub file: String,
    /// `log_info`.
    pub info: bool,
    /// `log_warning`.
    pub warning: bool,
    /// `log_error`.
    pub error: bool,
    /// `log_verbose_level`: 0 is off, 1 and more add verbose lines.
    pub verbose_level: u32,
    /// `log_format`.
    pub format: LogFormat,
}

impl Default for LogSettings {
    /// tritonserver's defaults: info, warnings and errors on, verbose off, stderr.
    fn default() -> Self {
        Self {
            file: String::new(),
            info: true,
            warning: true,
            error: true,
            verbose_level: 0,
            format: LogFormat::Default,
        }
    }
}

/// One setting's new value as a client sent it, before its type is checked; each
/// frontend maps its wire types onto these.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingValue {
    /// A JSON `true`/`false` or gRPC `bool_param`.
    Bool(bool),
    /// A non-negative JSON integer or gRPC `uint32_param`.
    Unsigned(u64),
    /// A JSON string or gRPC `string_param`.
    Text(String),
    /// Anything else, described for the error message ("a negative number", ...).
    Other(&'static str),
}

/// Applies settings to the process's logger.
pub trait LogSink: Send + Sync {
    /// Makes `settings` the logger's behaviour from the next line on.
    fn apply(&self, settings: &LogSettings);
}

/// The settings and the logger they drive; one per process, shared by the frontends.
pub struct LogControl {
    current: Mutex<LogSettings>,
    sink: Arc<dyn LogSink>,
}

impl std::fmt::Debug for LogControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogControl")
            .field("current", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl LogControl {
    /// A control whose logger already runs with `initial`.
    pub fn new(initial: LogSettings, sink: Arc<dyn LogSink>) -> Self {
        Self {
            current: Mutex::new(initial),
            sink,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> LogSettings {
        self.lock().clone()
    }

    /// Checks every change, then applies them together and returns the new settings.
    /// Triton applies the changes before the first bad one and then fails; here a bad
    /// change leaves every setting as it was. `log_file` cannot change over the network
    /// (Triton's Unsupported error), but sending back the current value is accepted, so
    /// a client may post the settings it read.
    pub fn update(&self, changes: &[(String, SettingValue)]) -> Result<LogSettings, Error> {
        let mut current = self.lock();
        let mut next = current.clone();
        for (name, value) in changes {
            apply_one(&mut next, name, value)?;
        }
        if next != *current {
            self.sink.apply(&next);
            *current = next.clone();
        }
        Ok(next)
    }

    fn lock(&self) -> MutexGuard<'_, LogSettings> {
        // The settings are plain values, valid even if a holder panicked.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Names accepted by [`LogControl::update`], for the unknown-setting message.
const SETTING_NAMES: &str =
    "log_file, log_info, log_warning, log_error, log_verbose_level, log_format";

fn apply_one(settings: &mut LogSettings, name: &str, value: &SettingValue) -> Result<(), Error> {
    let flag = match name {
        "log_info" => &mut settings.info,
        "log_warning" => &mut settings.warning,
        "log_error" => &mut settings.error,
        "log_verbose_level" => {
            settings.verbose_level = match value {
                SettingValue::Unsigned(n) => u32::try_from(*n).map_err(|_| {
                    Error::invalid_arg(format!(
                        "'log_verbose_level' must be at most {}, got {n}",
                        u32::MAX
                    ))
                })?,
                other => return Err(wrong_type(name, "a non-negative integer", other)),
            };
            return Ok(());
        }
        "log_format" => {
            let SettingValue::Text(text) = value else {
                return Err(wrong_type(name, "a string", value));
            };
            settings.format = LogFormat::parse(text).ok_or_else(|| {
                Error::invalid_arg(format!(
                    "invalid argument for log_format, got: {text} (expected default or ISO8601)"
                ))
            })?;
            return Ok(());
        }
        "log_file" => {
            return match value {
                SettingValue::Text(text) if *text == settings.file => Ok(()),
                _ => Err(Error::unsupported(
                    "log file location can not be updated through network protocol",
                )),
            };
        }
        _ => {
            return Err(Error::invalid_arg(format!(
                "unknown log setting '{name}': expected one of {SETTING_NAMES}"
            )))
        }
    };
    match value {
        SettingValue::Bool(on) => {
            *flag = *on;
            Ok(())
        }
        other => Err(wrong_type(name, "a boolean", other)),
    }
}

fn wrong_type(name: &str, expected: &str, got: &SettingValue) -> Error {
    let got = match got {
        SettingValue::Bool(_) => "a boolean",
        SettingValue::Unsigned(_) => "a non-negative integer",
        SettingValue::Text(_) => "a string",
        SettingValue::Other(what) => what,
    };
    Error::invalid_arg(format!("expect {expected} for '{name}', got {got}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn civil_dates_and_stamps_match_the_calendar() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(20_417), (2025, 11, 25));
        let at = std::time::Duration::new(20_417 * 86_400 + 3_723, 4_000);
        let mut glog = String::new();
        LogFormat::Default
            .write_stamp(&mut glog, at)
            .expect("written");
        assert_eq!(glog, "1125 01:02:03.000004");
        let mut iso = String::new();
        LogFormat::Iso8601
            .write_stamp(&mut iso, at)
            .expect("written");
        assert_eq!(iso, "2025-11-25T01:02:03Z");
    }

    /// Records what the logger was told.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<LogSettings>>);

    impl LogSink for Recorder {
        fn apply(&self, settings: &LogSettings) {
            self.0.lock().unwrap().push(settings.clone());
        }
    }

    fn control() -> (LogControl, Arc<Recorder>) {
        let recorder = Arc::new(Recorder::default());
        (
            LogControl::new(LogSettings::default(), recorder.clone()),
            recorder,
        )
    }

    fn change(name: &str, value: SettingValue) -> (String, SettingValue) {
        (name.to_string(), value)
    }

    #[test]
    fn changes_reach_the_logger_and_the_settings() {
        let (control, recorder) = control();
        let next = control
            .update(&[
                change("log_info", SettingValue::Bool(false)),
                change("log_verbose_level", SettingValue::Unsigned(2)),
                change("log_format", SettingValue::Text("ISO8601".into())),
            ])
            .unwrap();
        assert!(!next.info && next.warning && next.error);
        assert_eq!((next.verbose_level, next.format), (2, LogFormat::Iso8601));
        assert_eq!(control.settings(), next);
        assert_eq!(*recorder.0.lock().unwrap(), vec![next]);
    }

    #[test]
    fn one_bad_change_applies_none() {
        let (control, recorder) = control();
        let err = control
            .update(&[
                change("log_info", SettingValue::Bool(false)),
                change("log_format", SettingValue::Text("json".into())),
            ])
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArg);
        assert!(err.message().contains("got: json"), "{err}");
        assert_eq!(control.settings(), LogSettings::default());
        assert!(recorder.0.lock().unwrap().is_empty());
    }

    #[test]
    fn wrong_types_unknown_names_and_the_file_are_refused() {
        let (control, _) = control();
        let cases = [
            change("log_info", SettingValue::Unsigned(1)),
            change(
                "log_verbose_level",
                SettingValue::Other("a negative number"),
            ),
            change("log_verbose_level", SettingValue::Unsigned(1 << 40)),
            change("log_format", SettingValue::Bool(true)),
            change("log_level", SettingValue::Bool(true)),
        ];
        for case in cases {
            let err = control.update(std::slice::from_ref(&case)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArg, "{case:?}");
            assert!(err.message().contains(&format!("'{}'", case.0)), "{err}");
        }
        let err = control
            .update(&[change("log_file", SettingValue::Text("/tmp/x".into()))])
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        // Posting back what GET returned is no change.
        control
            .update(&[change("log_file", SettingValue::Text(String::new()))])
            .unwrap();
    }
}
