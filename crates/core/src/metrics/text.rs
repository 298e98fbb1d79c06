//! Prometheus' text exposition format, written in one place: every metric source (the
//! core's families, the response cache's, the CPU and GPU gauges, the OpenAI port's, the
//! llama.cpp engine's, hosted backends' custom metrics) appends its families through
//! [`Family`], which escapes help text and label values as the format requires. A
//! description or a label a plugin or a client chose may hold a newline, a quote or a
//! backslash; written raw, one such character breaks the whole scrape.

use std::fmt::Write;

use crate::stats::histogram::HistogramReading;

/// A family's `# TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, `_sum` and `_count`.
    Histogram,
    /// Quantiles, `_sum` and `_count`.
    Summary,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
            Self::Summary => "summary",
        }
    }
}

/// A sample's labels: names as the source defines them (valid label names), values as
/// anyone wrote them (escaped when written).
pub type Labels<'a> = [(&'a str, &'a str)];

/// A sample value as the text format spells it: integers as they are, floats in their
/// shortest form, with `NaN`, `+Inf` and `-Inf` for the special ones.
pub trait SampleValue {
    /// Appends the value's text.
    fn write_to(&self, out: &mut String);
}

impl SampleValue for u64 {
    fn write_to(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl SampleValue for f64 {
    fn write_to(&self, out: &mut String) {
        if self.is_nan() {
            out.push_str("NaN");
        } else if self.is_infinite() {
            out.push_str(if *self > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(out, "{self}");
        }
    }
}

/// One family being written into a scrape: its header is out, its samples follow.
pub struct Family<'a> {
    out: &'a mut String,
    name: &'a str,
}

impl<'a> Family<'a> {
    /// Starts family `name` in `out` with its `# HELP` (escaped) and `# TYPE` lines.
    pub fn start(out: &'a mut String, name: &'a str, help: &str, kind: Kind) -> Self {
        let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(out, "# TYPE {name} {}", kind.name());
        Self { out, name }
    }

    /// Starts family `name` unless `out` holds it already (a backend that exports the
    /// same family itself): a scrape may name each family once.
    pub fn start_unless_present(
        out: &'a mut String,
        name: &'a str,
        help: &str,
        kind: Kind,
    ) -> Option<Self> {
        let type_line = format!("# TYPE {name} ");
        let present = out.starts_with(&type_line) || out.contains(&format!("\n{type_line}"));
        (!present).then(|| Self::start(out, name, help, kind))
    }

    /// The sample `<family>{labels} value`.
    pub fn sample<V: SampleValue + ?Sized>(&mut self, labels: &Labels<'_>, value: &V) {
        self.suffixed("", labels, value);
    }

    /// The sample `<family><suffix>{labels} value` (`_sum`, `_count`, `_bucket`).
    pub fn suffixed<V: SampleValue + ?Sized>(
        &mut self,
        suffix: &str,
        labels: &Labels<'_>,
        value: &V,
    ) {
        self.out.push_str(self.name);
        self.out.push_str(suffix);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (name, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(name);
                self.out.push_str("=\"");
                escape_label_into(self.out, value);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        value.write_to(self.out);
        self.out.push('\n');
    }

    /// One histogram's samples as prometheus-cpp (Triton) writes them: `_count`, `_sum`,
    /// then one cumulative `_bucket` per bound, `+Inf` last.
    pub fn histogram(&mut self, labels: &Labels<'_>, reading: &HistogramReading) {
        self.suffixed("_count", labels, &reading.count);
        self.suffixed("_sum", labels, &reading.sum);
        for (le, count) in &reading.buckets {
            let mut bound = String::new();
            le.write_to(&mut bound);
            self.suffixed("_bucket", &with_label(labels, "le", &bound), count);
        }
    }
}

/// `labels` with one more (a bucket's `le`, a quantile).
pub fn with_label<'a>(
    labels: &Labels<'a>,
    name: &'a str,
    value: &'a str,
) -> Vec<(&'a str, &'a str)> {
    let mut all = Vec::with_capacity(labels.len() + 1);
    all.extend_from_slice(labels);
    all.push((name, value));
    all
}

/// A `# HELP` text as the format needs it: backslash and newline escaped (quotes stay).
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A label value as the format needs it: backslash, quote and newline escaped.
fn escape_label_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_help_and_label_values() {
        let mut out = String::new();
        let mut family = Family::start(
            &mut out,
            "m",
            "line one\nback\\slash \"quoted\"",
            Kind::Gauge,
        );
        family.sample(&[("model", "a\"b\\c\nd"), ("version", "1")], &2.5);
        family.sample(&[], &f64::INFINITY);
        family.suffixed("_count", &[], &3u64);
        assert_eq!(
            out,
            "# HELP m line one\\nback\\\\slash \"quoted\"\n\
             # TYPE m gauge\n\
             m{model=\"a\\\"b\\\\c\\nd\",version=\"1\"} 2.5\n\
             m +Inf\n\
             m_count 3\n"
        );
    }

    #[test]
    fn a_family_already_present_is_not_started_again() {
        let mut out = String::new();
        Family::start(&mut out, "x_total", "x", Kind::Counter).sample(&[], &1u64);
        assert!(Family::start_unless_present(&mut out, "x_total", "x", Kind::Counter).is_none());
        assert!(Family::start_unless_present(&mut out, "x", "x", Kind::Counter).is_some());
    }

    #[test]
    fn floats_are_written_as_the_format_spells_them() {
        let text = |v: f64| {
            let mut s = String::new();
            v.write_to(&mut s);
            s
        };
        assert_eq!(text(f64::NAN), "NaN");
        assert_eq!(text(f64::NEG_INFINITY), "-Inf");
        assert_eq!(text(0.25), "0.25");
        assert_eq!(text(100.0), "100");
    }
}
