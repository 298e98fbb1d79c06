//! Per-response statistics (Triton's `response_stats`): a backend that streams several
//! responses per request reports each one's timing, keyed by its index within the
//! request, through `TRITONBACKEND_ModelInstanceReportResponseStatistics`. Triton's
//! statistics extension shows them per index so a client can see, e.g., that a model's
//! first token takes longer than the ones after it.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde::Serialize;

use super::StatDuration;
use crate::error::{Error, Result};

/// How one reported response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseOutcome {
    /// Sent without an error; with outputs when the backend gave a compute-output start,
    /// an empty response (a final flag alone) otherwise.
    Sent,
    /// Sent with an error.
    Failed,
    /// Sent with a `CANCELLED` error.
    Cancelled,
}

/// One response's timestamps as the backend reported them (nanoseconds, its clock;
/// `compute_output_start` 0 when no outputs were produced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseTimes {
    /// When the backend began computing this response.
    pub start: u64,
    /// When it began writing this response's outputs (0: none written).
    pub compute_output_start: u64,
    /// When the response was complete.
    pub end: u64,
}

/// The statistics of the responses at one index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResponseStat {
    /// Time to compute the response (start to compute-output start, or to the end when
    /// nothing was written).
    pub compute_infer: StatDuration,
    /// Time to write its outputs.
    pub compute_output: StatDuration,
    /// Responses sent with outputs and no error: start to end.
    pub success: StatDuration,
    /// Responses sent with an error.
    pub fail: StatDuration,
    /// Responses without outputs (a final flag alone).
    pub empty_response: StatDuration,
    /// Responses cancelled.
    pub cancel: StatDuration,
}

/// The per-index statistics of one model version.
#[derive(Debug, Default)]
pub struct ResponseStats {
    // Keyed by the index as text, ordered as Triton's `std::map<std::string>` orders them
    // ("0", "1", "10", "2"). Touched once per reported response.
    by_index: Mutex<BTreeMap<String, ResponseStat>>,
}

fn add(d: &mut StatDuration, ns: u64) {
    d.count += 1;
    d.ns += ns;
}

impl ResponseStats {
    /// Records the response at `index`, refusing timestamps out of order with Triton's
    /// messages (nothing is recorded then).
    pub fn report(&self, index: u64, outcome: ResponseOutcome, t: ResponseTimes) -> Result<()> {
        let wrote_outputs = t.compute_output_start > 0 && outcome != ResponseOutcome::Cancelled;
        if wrote_outputs {
            if t.start > t.compute_output_start {
                return Err(out_of_order("Response start", "compute output start"));
            }
            if t.compute_output_start > t.end {
                return Err(out_of_order("Compute output start", "response end"));
            }
        } else if t.start > t.end {
            return Err(out_of_order("Response start", "response end"));
        }
        let total = t.end - t.start;
        let mut by_index = self.by_index.lock();
        let stat = by_index.entry(index.to_string()).or_default();
        match (outcome, wrote_outputs) {
            (ResponseOutcome::Cancelled, _) => add(&mut stat.cancel, total),
            (ResponseOutcome::Sent, false) => {
                add(&mut stat.compute_infer, total);
                add(&mut stat.empty_response, total);
            }
            (outcome, true) => {
                let output_ns = t.end - t.compute_output_start;
                add(&mut stat.compute_infer, t.compute_output_start - t.start);
                // A failed response counts its output time only when it took some.
                if outcome == ResponseOutcome::Sent || output_ns > 0 {
                    add(&mut stat.compute_output, output_ns);
                }
                let kind = match outcome {
                    ResponseOutcome::Failed => &mut stat.fail,
                    _ => &mut stat.success,
                };
                add(kind, total);
            }
            (ResponseOutcome::Failed, false) => {
                add(&mut stat.compute_infer, total);
                add(&mut stat.fail, total);
            }
        }
        Ok(())
    }

    /// Every index reported so far, in Triton's order.
    pub fn snapshot(&self) -> Vec<(String, ResponseStat)> {
        let by_index = self.by_index.lock();
        by_index.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

fn out_of_order(first: &str, second: &str) -> Error {
    Error::invalid_arg(format!("{first} cannot happen after {second}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(start: u64, compute_output_start: u64, end: u64) -> ResponseTimes {
        ResponseTimes {
            start,
            compute_output_start,
            end,
        }
    }

    fn d(count: u64, ns: u64) -> StatDuration {
        StatDuration { count, ns }
    }

    #[test]
    fn each_outcome_counts_as_triton_counts_it() {
        let stats = ResponseStats::default();
        stats
            .report(0, ResponseOutcome::Sent, times(100, 140, 160))
            .expect("in order");
        stats
            .report(0, ResponseOutcome::Sent, times(200, 230, 250))
            .expect("in order");
        stats
            .report(1, ResponseOutcome::Sent, times(300, 0, 307))
            .expect("empty");
        stats
            .report(2, ResponseOutcome::Failed, times(400, 0, 410))
            .expect("failed early");
        stats
            .report(10, ResponseOutcome::Failed, times(500, 520, 530))
            .expect("failed late");
        stats
            .report(3, ResponseOutcome::Cancelled, times(600, 0, 605))
            .expect("cancelled");
        let snapshot = stats.snapshot();
        let keys: Vec<&str> = snapshot.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["0", "1", "10", "2", "3"], "text order, as std::map");
        let at = |k: &str| {
            snapshot
                .iter()
                .find(|(key, _)| key == k)
                .expect("reported")
                .1
        };
        let first = at("0");
        assert_eq!(first.compute_infer, d(2, 70));
        assert_eq!(first.compute_output, d(2, 40));
        assert_eq!(first.success, d(2, 110));
        let empty = at("1");
        assert_eq!(
            (empty.compute_infer, empty.empty_response),
            (d(1, 7), d(1, 7))
        );
        assert_eq!((at("2").compute_infer, at("2").fail), (d(1, 10), d(1, 10)));
        let late = at("10");
        assert_eq!(
            (late.compute_infer, late.compute_output, late.fail),
            (d(1, 20), d(1, 10), d(1, 30))
        );
        assert_eq!(
            at("3"),
            ResponseStat {
                cancel: d(1, 5),
                ..Default::default()
            }
        );
    }

    #[test]
    fn timestamps_out_of_order_are_refused_and_not_counted() {
        let stats = ResponseStats::default();
        let e = stats
            .report(0, ResponseOutcome::Sent, times(200, 100, 300))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "Response start cannot happen after compute output start"
        );
        let e = stats
            .report(0, ResponseOutcome::Sent, times(100, 300, 200))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "Compute output start cannot happen after response end"
        );
        let e = stats
            .report(0, ResponseOutcome::Sent, times(300, 0, 200))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "Response start cannot happen after response end"
        );
        assert!(stats.snapshot().is_empty());
    }
}
