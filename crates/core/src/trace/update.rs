//! Settings updates as the frontends receive them, checked with Triton's messages (and
//! precise ones where Triton accepts nonsense or says nothing).

use crate::error::{Error, Result};

use super::setting::TraceLevel;

/// One setting's new value as a frontend decoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingValue {
    /// JSON `null` / an empty gRPC list: back to the fallback (the global setting for a
    /// model, the start-up setting for the global one).
    Clear,
    /// A JSON string / a one-value gRPC list.
    Scalar(String),
    /// A JSON array of strings / a gRPC list (the form `trace_level` takes).
    List(Vec<String>),
}

/// A requested change to one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Change<T> {
    #[default]
    Keep,
    Clear,
    Set(T),
}

impl<T: Copy> Change<T> {
    pub fn is_clear(&self) -> bool {
        matches!(self, Change::Clear)
    }

    pub fn is_set(&self) -> bool {
        matches!(self, Change::Set(_))
    }

    pub fn value(&self) -> Option<T> {
        match self {
            Change::Set(v) => Some(*v),
            _ => None,
        }
    }
}

/// Triton's `NewSetting`: the changes one update asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct NewSetting {
    pub level: Change<TraceLevel>,
    pub rate: Change<u32>,
    pub count: Change<i32>,
    pub log_frequency: Change<u32>,
}

/// Checks an update: known names only, each with a value of the right form and range.
pub(crate) fn parse(settings: &[(String, SettingValue)]) -> Result<NewSetting> {
    let mut new = NewSetting::default();
    for (name, value) in settings {
        match name.as_str() {
            "trace_file" => {
                return Err(Error::unsupported(
                    "trace file location can not be updated through network protocol",
                ))
            }
            "trace_mode" => {
                return Err(Error::unsupported(
                    "trace mode can not be updated through network protocol",
                ))
            }
            "trace_level" => new.level = level(value)?,
            "trace_rate" => {
                new.rate = number(name, value, 0, i64::from(u32::MAX))?.map(|v| v as u32)
            }
            "trace_count" => {
                new.count = match number(name, value, -1, i64::from(i32::MAX))? {
                    Change::Set(v) if v < -1 => {
                        return Err(Error::invalid_arg(format!(
                            "Unable to parse 'trace_count'. Expecting value >= -1, got:{text}",
                            text = scalar_text(value)
                        )))
                    }
                    change => change.map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
                }
            }
            "log_frequency" => {
                new.log_frequency = number(name, value, 0, i64::from(u32::MAX))?.map(|v| v as u32)
            }
            other => {
                return Err(Error::invalid_arg(format!(
                    "unknown trace setting '{other}': expected trace_level, trace_rate, \
                     trace_count or log_frequency"
                )))
            }
        }
    }
    Ok(new)
}

impl<T> Change<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Change<U> {
        match self {
            Change::Keep => Change::Keep,
            Change::Clear => Change::Clear,
            Change::Set(v) => Change::Set(f(v)),
        }
    }
}

fn level(value: &SettingValue) -> Result<Change<TraceLevel>> {
    let names =
        match value {
            SettingValue::Clear => return Ok(Change::Clear),
            SettingValue::List(names) if !names.is_empty() => names,
            SettingValue::List(_) => return Err(Error::invalid_arg(
                "Unable to parse 'trace_level': expected at least one of OFF, TIMESTAMPS, TENSORS",
            )),
            SettingValue::Scalar(s) => {
                return Err(Error::invalid_arg(format!(
                    "Unable to parse 'trace_level': expected an array of levels, got \"{s}\""
                )))
            }
        };
    let mut level = TraceLevel::OFF;
    for name in names {
        match name.as_str() {
            "OFF" if names.len() == 1 => {}
            "OFF" => {
                return Err(Error::invalid_arg(
                    "Expect only one trace level 'OFF' is specified",
                ))
            }
            "TIMESTAMPS" => level.timestamps = true,
            "TENSORS" => level.tensors = true,
            other => {
                return Err(Error::invalid_arg(format!(
                    "Unable to parse 'trace_level', got: {other} (expected OFF, TIMESTAMPS or \
                     TENSORS)"
                )))
            }
        }
    }
    Ok(Change::Set(level))
}

/// A whole-number setting within `[min, max]`, with Triton's messages.
fn number(name: &str, value: &SettingValue, min: i64, max: i64) -> Result<Change<i64>> {
    let text = match value {
        SettingValue::Clear => return Ok(Change::Clear),
        SettingValue::Scalar(text) => text,
        SettingValue::List(values) => {
            return Err(Error::invalid_arg(format!(
                "expect only 1 value for '{name}', got {}",
                values.len()
            )))
        }
    };
    let trimmed = text.trim();
    let digits = trimmed.strip_prefix(['-', '+']).unwrap_or(trimmed);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::invalid_arg(format!(
            "Unable to parse '{name}', got: {text}"
        )));
    }
    match trimmed.parse::<i64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(Change::Set(v)),
        // trace_count's lower bound has its own message, given by the caller.
        Ok(v) if name == "trace_count" && v < -1 => Ok(Change::Set(v)),
        _ => Err(Error::invalid_arg(format!(
            "Unable to parse '{name}', value is out of range [ {min}, {max} ], got: {text}"
        ))),
    }
}

fn scalar_text(value: &SettingValue) -> &str {
    match value {
        SettingValue::Scalar(text) => text,
        _ => "",
    }
}
