//! Presenting results: the progress line on stderr, the table on stdout, CSV and JSON files.
//!
//! Latencies are in microseconds everywhere and throughput counts inferences (batch
//! elements) per second, as perf_analyzer reports them; the CSV header reuses
//! perf_analyzer's column names where the column means the same.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

use crate::load::{Load, StepOutcome};
use crate::stats::{ClientSummary, ServerSummary};

/// One sweep step in the report.
#[derive(Clone, Debug, Serialize)]
pub struct StepReport {
    /// Workers, in concurrency mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// Requests per second asked for, in request-rate mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
    /// Client-side results.
    #[serde(flatten)]
    pub client: ClientSummary,
    /// Server-side averages from the statistics extension.
    pub server: Option<ServerSummary>,
    /// Whether the measurement met the stability rule.
    pub stable: bool,
    /// Windows measured.
    pub trials: u32,
    /// First error message of the step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl StepReport {
    /// The report row of a step run at `load`.
    pub fn new(load: Load, outcome: StepOutcome) -> Self {
        let (concurrency, request_rate) = match load {
            Load::Concurrency(n) => (Some(n), None),
            Load::Rate(r) => (None, Some(r)),
        };
        Self {
            concurrency,
            request_rate,
            client: outcome.client,
            server: outcome.server,
            stable: outcome.stable,
            trials: outcome.trials,
            first_error: outcome.first_error,
        }
    }

    /// The load column: the concurrency or the rate.
    fn load(&self) -> String {
        match (self.concurrency, self.request_rate) {
            (Some(n), _) => n.to_string(),
            (None, Some(r)) => format!("{r}"),
            (None, None) => String::new(),
        }
    }
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Model name.
    pub model: String,
    /// Model version asked for ("" = server's choice).
    pub model_version: String,
    /// Protocol.
    pub protocol: crate::cli::Protocol,
    /// Whether gRPC streaming was used.
    pub streaming: bool,
    /// Batch size of each request.
    pub batch_size: u32,
    /// `"concurrency"` or `"request_rate"`.
    pub mode: &'static str,
    /// Window length in milliseconds.
    pub measurement_interval_ms: u64,
    /// One entry per sweep step.
    pub steps: Vec<StepReport>,
}

/// Column headers of the table and the CSV, after the load column.
const COLUMNS: [(&str, &str); 13] = [
    ("Infer/s", "Inferences/Second"),
    ("p50 us", "p50 latency"),
    ("p90 us", "p90 latency"),
    ("p95 us", "p95 latency"),
    ("p99 us", "p99 latency"),
    ("Avg us", "Avg latency"),
    ("Errors", "Errors"),
    ("Queue us", "Server Queue"),
    ("In us", "Server Compute Input"),
    ("Infer us", "Server Compute Infer"),
    ("Out us", "Server Compute Output"),
    ("Batch", "Server Avg Batch Size"),
    ("Stable", "Stable"),
];

impl Report {
    fn load_header(&self) -> (&'static str, &'static str) {
        if self.mode == "request_rate" {
            ("Rate", "Request Rate")
        } else {
            ("Concurrency", "Concurrency")
        }
    }

    /// The cells of one row, after the load column; server columns are `-` when the
    /// statistics could not be read.
    fn cells(step: &StepReport) -> Vec<String> {
        let c = &step.client;
        let mut cells = vec![
            format!("{:.1}", c.throughput),
            format!("{:.0}", c.p50_us),
            format!("{:.0}", c.p90_us),
            format!("{:.0}", c.p95_us),
            format!("{:.0}", c.p99_us),
            format!("{:.0}", c.avg_us),
            c.errors.to_string(),
        ];
        match &step.server {
            Some(s) => cells.extend([
                format!("{:.0}", s.queue_us),
                format!("{:.0}", s.compute_input_us),
                format!("{:.0}", s.compute_infer_us),
                format!("{:.0}", s.compute_output_us),
                format!("{:.2}", s.avg_batch_size),
            ]),
            None => cells.extend(std::iter::repeat_n("-".to_string(), 5)),
        }
        cells.push(if step.stable { "yes" } else { "no" }.to_string());
        cells
    }

    /// The aligned table: a header line, then one row per step, columns right-aligned.
    pub fn table(&self) -> String {
        let mut rows: Vec<Vec<String>> = Vec::with_capacity(self.steps.len() + 1);
        let mut header = vec![self.load_header().0.to_string()];
        header.extend(COLUMNS.iter().map(|(short, _)| short.to_string()));
        rows.push(header);
        for step in &self.steps {
            let mut row = vec![step.load()];
            row.extend(Self::cells(step));
            rows.push(row);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &rows {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, &w)| format!("{cell:>w$}"))
                .collect();
            let _ = writeln!(out, "{}", line.join("  "));
        }
        out
    }

    /// The CSV text: perf_analyzer-style header, one line per step.
    pub fn csv(&self) -> String {
        let mut out = String::new();
        let mut header = vec![self.load_header().1];
        header.extend(COLUMNS.iter().map(|(_, long)| *long));
        let _ = writeln!(out, "{}", header.join(","));
        for step in &self.steps {
            let mut row = vec![step.load()];
            row.extend(Self::cells(step).into_iter().map(
                |c| {
                    if c == "-" {
                        String::new()
                    } else {
                        c
                    }
                },
            ));
            let _ = writeln!(out, "{}", row.join(","));
        }
        out
    }

    /// Writes the CSV file.
    pub fn write_csv(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.csv()).with_context(|| format!("writing {}", path.display()))
    }

    /// Writes the JSON file.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).context("encoding the JSON report")?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Protocol;

    fn report() -> Report {
        let step = |n: usize, server: bool| StepReport {
            concurrency: Some(n),
            request_rate: None,
            client: ClientSummary {
                requests: 10,
                throughput: 1234.56,
                p50_us: 100.0,
                p90_us: 150.0,
                p95_us: 160.0,
                p99_us: 1000.0,
                avg_us: 110.0,
                errors: 0,
                delayed_fraction: 0.0,
            },
            server: server.then_some(ServerSummary {
                requests: 10,
                queue_us: 5.0,
                compute_input_us: 1.0,
                compute_infer_us: 50.0,
                compute_output_us: 2.0,
                avg_batch_size: 1.0,
            }),
            stable: true,
            trials: 3,
            first_error: None,
        };
        Report {
            model: "m".into(),
            model_version: String::new(),
            protocol: Protocol::Http,
            streaming: false,
            batch_size: 1,
            mode: "concurrency",
            measurement_interval_ms: 1000,
            steps: vec![step(1, true), step(16, false)],
        }
    }

    #[test]
    fn table_columns_line_up() {
        let table = report().table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("Concurrency"));
        assert!(lines.iter().all(|l| l.len() == lines[0].len()));
        assert!(lines[2].contains(" -  "));
    }

    #[test]
    fn csv_has_perf_analyzer_names_and_blank_missing_cells() {
        let csv = report().csv();
        let mut lines = csv.lines();
        let header = lines.next().expect("header");
        assert!(header.starts_with("Concurrency,Inferences/Second,p50 latency"));
        let row2 = lines.nth(1).expect("second row");
        assert_eq!(row2.split(',').count(), header.split(',').count());
        assert!(row2.contains(",,"));
    }
}
