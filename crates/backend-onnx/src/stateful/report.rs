//! The stateful backend's own logs, with the original's levels: `logging_level` (NONE,
//! INFO, VERBOSE) gates everything; per-execution batch lines go out at
//! `batch_info_logging_level`, and the periodic summary every
//! `metric_logging_frequency_seconds` adds timings at `detailed_metrics_logging_level`.
//! Per-execution lines are emitted at tracing's debug level (see [`Report::executed`]).

use std::time::{Duration, Instant};

use nereid_core::backend::{ComputeTiming, StateUsage};

use super::params::{LogLevel, StatefulParams};
use super::store::Change;

/// Counters and log settings of one instance.
pub struct Report {
    model: String,
    instance: String,
    level: LogLevel,
    batch_info: LogLevel,
    detailed: LogLevel,
    every: Option<Duration>,
    since: Instant,
    executions: u64,
    rows: u64,
    max_rows: usize,
    infer_ns: u64,
}

impl Report {
    /// The report of `instance` of `model`.
    pub fn new(model: &str, instance: &str, params: &StatefulParams) -> Self {
        Self {
            model: model.to_string(),
            instance: instance.to_string(),
            level: params.logging_level,
            batch_info: params.batch_info_level,
            detailed: params.detailed_metrics_level,
            every: (params.metric_logging_seconds > 0)
                .then(|| Duration::from_secs(params.metric_logging_seconds)),
            since: Instant::now(),
            executions: 0,
            rows: 0,
            max_rows: 0,
            infer_ns: 0,
        }
    }

    fn enabled(&self, at: LogLevel) -> bool {
        at != LogLevel::None && at <= self.level
    }

    /// One execution of `rows` sequences (`padded` rows run).
    pub fn executed(
        &mut self,
        rows: usize,
        padded: usize,
        timing: &ComputeTiming,
        usage: StateUsage,
    ) {
        self.executions += 1;
        self.rows += rows as u64;
        self.max_rows = self.max_rows.max(rows);
        self.infer_ns += timing.infer_ns;
        // One line per execution: at debug level, so that it costs nothing unless the
        // server logs verbosely (--log-verbose), whatever the model's levels say.
        if rows > 0 && self.enabled(self.batch_info) {
            tracing::debug!(
                model = %self.model,
                instance = %self.instance,
                "stateful batch: {rows} sequences, {padded} rows run, {} sequences stored",
                usage.sequences
            );
        }
        let Some(every) = self.every else {
            return;
        };
        if self.since.elapsed() < every || !self.enabled(LogLevel::Info) {
            return;
        }
        let average = self.rows as f64 / self.executions.max(1) as f64;
        tracing::info!(
            model = %self.model,
            instance = %self.instance,
            "stateful metrics: {} executions, average batch {average:.1}, largest {}, {} of {} sequence slots in use, {} state buffers ({} bytes)",
            self.executions,
            self.max_rows,
            usage.sequences,
            usage.capacity,
            usage.buffers,
            usage.bytes
        );
        if self.enabled(self.detailed) {
            tracing::info!(
                model = %self.model,
                instance = %self.instance,
                "stateful metrics: average inference {:.1} µs",
                self.infer_ns as f64 / self.executions.max(1) as f64 / 1000.0
            );
        }
        self.since = Instant::now();
        self.executions = 0;
        self.rows = 0;
        self.max_rows = 0;
        self.infer_ns = 0;
    }

    /// A lazy-allocation step.
    pub fn buffers_changed(&self, change: Change, usage: StateUsage) {
        if self.enabled(LogLevel::Info) {
            let what = match change {
                Change::Grew => "allocated a state buffer",
                Change::Shrank => "released the last state buffer",
            };
            tracing::info!(
                model = %self.model,
                instance = %self.instance,
                buffers = usage.buffers,
                bytes = usage.bytes,
                capacity = usage.capacity,
                "{what}"
            );
        }
    }
}
