//! The trace extension, Triton's `triton` mode: global and per-model trace settings
//! (`/v2/trace/setting`, `TraceSetting`), sampling every `trace_rate`-th request while
//! `trace_count` lasts, and the sampled requests' timestamps and tensors written as
//! Triton's JSON trace files.
//!
//! The `opentelemetry` mode records the same activities and hands each finished
//! request's spans to a [`SpanSink`] (see [`spans`] for their shape); a client's W3C
//! trace context is continued and forces sampling, as in Triton.
//!
//! Cost when tracing is off: one atomic load per request ([`TraceManager::sample`]).
//! A sampled request carries a [`RequestTrace`] in its [`crate::request::InferRequest`];
//! the frontends, the model and the instance worker add their records to it, and the
//! records are collected when the last holder drops it. Writing never fails a request:
//! errors are logged.

mod record;
mod setting;
mod spans;
mod update;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime};

use parking_lot::Mutex;

pub use record::{
    format_data, format_g, next_trace_id, stamp, RequestTrace, TensorActivity, TraceListener,
    TracedTensor,
};
pub use setting::{TraceFile, TraceLevel, TraceMode};
pub use spans::{AttributeValue, FinishedSpan, FinishedTrace, RemoteParent, SpanSink};
pub use update::SettingValue;

use crate::error::{Error, Result};
use setting::{Setting, Specified, Values};

/// The start-up trace configuration (`--trace-config`, Triton's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceOptions {
    /// `level=`: what is traced; `OFF` by default.
    pub level: TraceLevel,
    /// `rate=`: every n-th request is traced; 1000 by default.
    pub rate: u32,
    /// `count=`: how many traces to take, -1 (the default) for no limit.
    pub count: i32,
    /// `triton,log-frequency=`: write every n traces to `<file>.<i>`; 0 (the default)
    /// writes to `<file>` at shutdown or when the setting is replaced.
    pub log_frequency: u32,
    /// `triton,file=`: the trace file; empty (the default) traces nothing.
    pub file: String,
    /// `mode=`.
    pub mode: TraceMode,
    /// The mode's own settings as given (`opentelemetry,url=...`), listed in the settings
    /// answer as Triton lists them.
    pub mode_settings: Vec<(String, String)>,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self {
            level: TraceLevel::OFF,
            rate: 1000,
            count: -1,
            log_frequency: 0,
            file: String::new(),
            mode: TraceMode::Triton,
            mode_settings: Vec::new(),
        }
    }
}

/// Turns `Instant`s into the nanoseconds traces show: a monotonic clock counted from
/// when the trace manager started (Triton shows its steady clock, whose origin differs;
/// only differences between timestamps carry meaning in either).
/// Spans carry wall-clock times instead: the origin's wall time plus the same difference.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
    wall_origin: SystemTime,
}

impl Clock {
    fn now() -> Self {
        Self {
            origin: Instant::now(),
            wall_origin: SystemTime::now(),
        }
    }

    pub(crate) fn ns(&self, at: Instant) -> u128 {
        at.saturating_duration_since(self.origin).as_nanos()
    }

    pub(crate) fn wall(&self, at: Instant) -> SystemTime {
        self.wall_origin + at.saturating_duration_since(self.origin)
    }
}

/// A setting as the settings answer lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettingsView {
    /// `trace_level`.
    pub level: TraceLevel,
    /// `trace_rate`.
    pub rate: u32,
    /// `trace_count`, counting down as traces are taken.
    pub count: i32,
    /// `log_frequency`.
    pub log_frequency: u32,
    /// `trace_file`.
    pub file: String,
    /// `trace_mode`.
    pub mode: TraceMode,
    /// The mode's own start-up settings, listed after the mode.
    pub mode_settings: Vec<(String, String)>,
}

impl TraceSettingsView {
    /// The answer's name/value pairs in Triton's order, every value a list of strings
    /// (HTTP shows the level as an array and the rest as strings; gRPC all as lists).
    pub fn entries(&self) -> Vec<(&'static str, Vec<String>)> {
        let mut entries = vec![
            (
                "trace_level",
                self.level.names().into_iter().map(String::from).collect(),
            ),
            ("trace_rate", vec![self.rate.to_string()]),
            ("trace_count", vec![self.count.to_string()]),
        ];
        if self.mode == TraceMode::Triton {
            entries.push(("log_frequency", vec![self.log_frequency.to_string()]));
            entries.push(("trace_file", vec![self.file.clone()]));
        }
        entries.push(("trace_mode", vec![self.mode.as_str().to_string()]));
        entries
    }

    /// The mode's own settings (`url`, `resource`, ...), each value a string; a setting
    /// given twice is listed twice, as Triton does.
    pub fn mode_entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.mode_settings
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }
}

/// Triton's `TraceManager`: the settings and the sampling decision.
pub struct TraceManager {
    /// Whether any setting traces: the one check a request pays while tracing is off.
    active: AtomicBool,
    clock: Clock,
    // Read once per request while tracing is on (to find the model's setting) and
    // written by setting updates; no I/O or await inside.
    state: Mutex<State>,
    /// Where the `opentelemetry` mode's spans go.
    sink: Option<Arc<dyn SpanSink>>,
    mode_settings: Vec<(String, String)>,
}

struct State {
    /// The start-up setting, the fallback of the global one.
    global_default: Arc<Setting>,
    global: Arc<Setting>,
    models: HashMap<String, Arc<Setting>>,
    /// Models whose setting mirrors some global values, re-derived on global updates.
    fallback_used: BTreeSet<String>,
    files: HashMap<String, Weak<TraceFile>>,
}

impl TraceManager {
    /// A manager with `options` as the global setting, sending the `opentelemetry`
    /// mode's spans to `sink`. Refuses that mode without a sink, and a trace file whose
    /// folder does not exist.
    pub fn new(options: &TraceOptions, sink: Option<Arc<dyn SpanSink>>) -> Result<Self> {
        if options.mode == TraceMode::OpenTelemetry && sink.is_none() {
            return Err(Error::unsupported(
                "trace mode 'opentelemetry' needs a span exporter, and none was configured",
            ));
        }
        check_writable(&options.file)?;
        let file = Arc::new(TraceFile::new(options.file.clone()));
        let values = Values {
            level: options.level,
            rate: options.rate,
            count: options.count,
            log_frequency: options.log_frequency,
        };
        let setting = || {
            Arc::new(Setting::new(
                values,
                Specified::default(),
                file.clone(),
                options.mode,
            ))
        };
        let state = State {
            global_default: setting(),
            global: setting(),
            models: HashMap::new(),
            fallback_used: BTreeSet::new(),
            files: HashMap::from([(options.file.clone(), Arc::downgrade(&file))]),
        };
        let manager = Self {
            active: AtomicBool::new(false),
            clock: Clock::now(),
            state: Mutex::new(state),
            sink,
            mode_settings: options.mode_settings.clone(),
        };
        manager.refresh_active(&manager.state.lock());
        Ok(manager)
    }

    /// Tracing off, the default: every request passes one atomic check.
    pub fn disabled() -> Self {
        Self::new(&TraceOptions::default(), None).expect("the default options are valid")
    }

    /// Whether any setting traces (so frontends skip even reading the clock otherwise).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Decides whether to trace a request for `model` and, if so, starts its trace.
    pub fn sample(&self, model: &str) -> Option<RequestTrace> {
        self.sample_propagated(model, &|_| None)
    }

    /// As [`TraceManager::sample`], for a request whose headers (or gRPC metadata)
    /// `header` looks up: in the `opentelemetry` mode a W3C trace context there is
    /// continued and the request is traced whatever the rate and count (Triton's
    /// context propagation).
    pub fn sample_propagated(
        &self,
        model: &str,
        header: &dyn Fn(&str) -> Option<String>,
    ) -> Option<RequestTrace> {
        if !self.active.load(Ordering::Relaxed) {
            return None;
        }
        let setting = {
            let state = self.state.lock();
            state.models.get(model).unwrap_or(&state.global).clone()
        };
        let remote_parent = match &self.sink {
            Some(sink)
                if setting.mode == TraceMode::OpenTelemetry && !setting.values.level.is_off() =>
            {
                sink.extract(header)
            }
            _ => None,
        };
        setting
            .sample(remote_parent.is_some())
            .then(|| RequestTrace::new(setting, self.clock, self.sink.as_ref(), remote_parent))
    }

    /// The setting in force for `model` (its own, else the global one), or the global
    /// setting for `None`.
    pub fn settings(&self, model: Option<&str>) -> TraceSettingsView {
        let state = self.state.lock();
        let setting = model
            .and_then(|m| state.models.get(m))
            .unwrap_or(&state.global);
        let values = setting.current_values();
        TraceSettingsView {
            level: values.level,
            rate: values.rate,
            count: values.count,
            log_frequency: values.log_frequency,
            file: setting.file.name().to_string(),
            mode: setting.mode,
            mode_settings: self.mode_settings.clone(),
        }
    }

    /// Applies a settings update (name → value, as the frontends decoded it) to the
    /// global setting (`None`) or to `model`'s; the caller has checked that the model
    /// exists. A refused update changes nothing.
    pub fn update(&self, model: Option<&str>, settings: &[(String, SettingValue)]) -> Result<()> {
        let new = update::parse(settings)?;
        let mut state = self.state.lock();
        let setting = self.derive(&mut state, model, &new)?;
        let mut old = vec![install(&mut state, model.map(str::to_string), setting)];
        if model.is_none() {
            // Models mirroring global values follow the new global setting.
            let fallback: Vec<String> = state.fallback_used.iter().cloned().collect();
            for name in fallback {
                let setting =
                    self.derive(&mut state, Some(&name), &update::NewSetting::default())?;
                old.push(install(&mut state, Some(name), setting));
            }
        }
        self.refresh_active(&state);
        drop(state);
        // Replaced settings write what they collected once their last trace is done.
        drop(old);
        Ok(())
    }

    /// The setting `scope` would have after `new` (Triton's `UpdateTraceSettingInternal`):
    /// `None` inside means the model's own setting goes away.
    fn derive(
        &self,
        state: &mut State,
        model: Option<&str>,
        new: &update::NewSetting,
    ) -> Result<Option<Arc<Setting>>> {
        let (current, fallback) = match model {
            Some(m) => (state.models.get(m).cloned(), state.global.clone()),
            None => (Some(state.global.clone()), state.global_default.clone()),
        };
        let was = |f: fn(&Specified) -> bool| current.as_ref().is_some_and(|c| f(&c.specified));
        let specified = Specified {
            level: !new.level.is_clear() && (was(|s| s.level) || new.level.is_set()),
            rate: !new.rate.is_clear() && (was(|s| s.rate) || new.rate.is_set()),
            count: !new.count.is_clear() && (was(|s| s.count) || new.count.is_set()),
            log_frequency: !new.log_frequency.is_clear()
                && (was(|s| s.log_frequency) || new.log_frequency.is_set()),
        };
        let base = fallback.current_values();
        let own = current.as_ref().map(|c| c.current_values()).unwrap_or(base);

        let values = Values {
            level: pick(specified.level, new.level.value(), own.level, base.level),
            rate: pick(specified.rate, new.rate.value(), own.rate, base.rate),
            count: pick(specified.count, new.count.value(), own.count, base.count),
            log_frequency: pick(
                specified.log_frequency,
                new.log_frequency.value(),
                own.log_frequency,
                base.log_frequency,
            ),
        };
        if let Some(m) = model {
            if specified.none() {
                state.fallback_used.remove(m);
                return Ok(None);
            }
        }
        let name = fallback.file.name().to_string();
        let file = match state.files.get(&name).and_then(Weak::upgrade) {
            Some(file) => file,
            None => {
                let file = Arc::new(TraceFile::new(name.clone()));
                state.files.insert(name, Arc::downgrade(&file));
                file
            }
        };
        let setting = Setting::new(values, specified, file, fallback.mode);
        if let Some(reason) = setting.invalid_reason() {
            if !values.level.is_off() {
                return Err(Error::invalid_arg(format!(
                    "Attempting to set invalid trace setting :{reason}"
                )));
            }
        }
        if let Some(m) = model {
            // A model's trace file is always the global one, so it always mirrors some.
            state.fallback_used.insert(m.to_string());
        }
        Ok(Some(Arc::new(setting)))
    }

    fn refresh_active(&self, state: &State) {
        let active = !state.global.values.level.is_off()
            || state.models.values().any(|s| !s.values.level.is_off());
        self.active.store(active, Ordering::Relaxed);
    }

    /// Writes what every setting still holds and closes the trace files (at shutdown).
    pub fn flush(&self) {
        let state = self.state.lock();
        let settings: Vec<Arc<Setting>> = [&state.global_default, &state.global]
            .into_iter()
            .chain(state.models.values())
            .cloned()
            .collect();
        let files: Vec<Arc<TraceFile>> = state.files.values().filter_map(Weak::upgrade).collect();
        drop(state);
        for setting in settings {
            setting.flush();
        }
        for file in files {
            file.close();
        }
        if let Some(sink) = &self.sink {
            sink.shutdown();
        }
    }
}

/// Puts `setting` in place for `scope` (removing a model's own setting for `None`) and
/// returns the setting it replaced.
fn install(
    state: &mut State,
    scope: Option<String>,
    setting: Option<Arc<Setting>>,
) -> Option<Arc<Setting>> {
    match (scope, setting) {
        (None, Some(setting)) => Some(std::mem::replace(&mut state.global, setting)),
        (None, None) => None,
        (Some(model), Some(setting)) => state.models.insert(model, setting),
        (Some(model), None) => state.models.remove(&model),
    }
}

/// Refuses a trace file that could never be written: its folder is missing or is not a
/// folder. (The file itself is created at the first write, as Triton does.)
fn check_writable(file: &str) -> Result<()> {
    if file.is_empty() {
        return Ok(());
    }
    let path = std::path::Path::new(file);
    if path.is_dir() {
        return Err(Error::invalid_arg(format!(
            "trace file '{file}' is a directory"
        )));
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !folder.is_dir() {
        return Err(Error::invalid_arg(format!(
            "trace file '{file}' cannot be written: folder '{}' does not exist",
            folder.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;

/// A value after an update: the new one, else this scope's own when it was given here,
/// else the fallback's.
fn pick<T>(specified: bool, new: Option<T>, own: T, fallback: T) -> T {
    match (specified, new) {
        (true, Some(v)) => v,
        (true, None) => own,
        (false, _) => fallback,
    }
}
