//! A custom histogram metric (`TRITONSERVER_METRIC_KIND_HISTOGRAM`): observations counted
//! into the buckets a backend gave, written as Prometheus writes a histogram — `_count`,
//! `_sum`, then each bucket's cumulative count under its `le` bound, `+Inf` last.

use std::fmt::Write as _;

/// One histogram series.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds, strictly increasing; the `+Inf` bucket is implied.
    bounds: Vec<f64>,
    /// Observations per bucket (not cumulative), one more than `bounds` for `+Inf`.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// A histogram over `bounds`, which must be strictly increasing (as prometheus-cpp,
    /// whose message this is, requires); no bounds leaves the `+Inf` bucket alone.
    pub fn new(bounds: Vec<f64>) -> Result<Self, &'static str> {
        if bounds.windows(2).any(|pair| pair[0] >= pair[1]) || bounds.iter().any(|b| b.is_nan()) {
            return Err("Bucket Boundaries must be strictly sorted");
        }
        let counts = vec![0; bounds.len() + 1];
        Ok(Self {
            bounds,
            counts,
            sum: 0.0,
        })
    }

    /// Counts `value` into the first bucket whose bound is at least `value`.
    pub fn observe(&mut self, value: f64) {
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        self.counts[bucket] += 1;
        self.sum += value;
    }

    /// Appends the series' lines for metric `name` with `labels` (`{a="1"}`, or empty).
    pub fn render(&self, name: &str, labels: &str, out: &mut String) {
        let total: u64 = self.counts.iter().sum();
        let _ = writeln!(out, "{name}_count{labels} {total}");
        let _ = writeln!(out, "{name}_sum{labels} {}", self.sum);
        // `le` joins the series' own labels.
        let open = match labels.strip_suffix('}') {
            Some(inner) => format!("{inner},"),
            None => "{".to_string(),
        };
        let mut cumulative = 0;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count;
            let bound = match self.bounds.get(i) {
                Some(bound) => bound.to_string(),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{name}_bucket{open}le=\"{bound}\"}} {cumulative}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_fall_into_cumulative_buckets() {
        let mut h = Histogram::new(vec![0.1, 1.0, 2.5, 5.0, 10.0]).expect("sorted");
        for value in [0.05, 1.5, 6.0] {
            h.observe(value);
        }
        let mut text = String::new();
        h.render("m", "{a=\"x\"}", &mut text);
        assert_eq!(
            text,
            "m_count{a=\"x\"} 3\nm_sum{a=\"x\"} 7.55\n\
             m_bucket{a=\"x\",le=\"0.1\"} 1\nm_bucket{a=\"x\",le=\"1\"} 1\n\
             m_bucket{a=\"x\",le=\"2.5\"} 2\nm_bucket{a=\"x\",le=\"5\"} 2\n\
             m_bucket{a=\"x\",le=\"10\"} 3\nm_bucket{a=\"x\",le=\"+Inf\"} 3\n"
        );
    }

    #[test]
    fn a_value_on_a_bound_counts_in_that_bucket_and_labels_may_be_absent() {
        let mut h = Histogram::new(vec![1.0]).expect("sorted");
        h.observe(1.0);
        let mut text = String::new();
        h.render("m", "", &mut text);
        assert_eq!(
            text,
            "m_count 1\nm_sum 1\nm_bucket{le=\"1\"} 1\nm_bucket{le=\"+Inf\"} 1\n"
        );
    }

    #[test]
    fn bounds_must_be_strictly_increasing() {
        assert!(Histogram::new(vec![2.5, 0.1]).is_err());
        assert!(Histogram::new(vec![1.0, 1.0, 2.0]).is_err());
        assert!(Histogram::new(vec![f64::NAN]).is_err());
        let mut only_inf = Histogram::new(Vec::new()).expect("no bounds");
        only_inf.observe(3.0);
        let mut text = String::new();
        only_inf.render("m", "", &mut text);
        assert!(text.ends_with("m_bucket{le=\"+Inf\"} 1\n"), "{text}");
    }
}
