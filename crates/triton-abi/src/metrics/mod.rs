//! `TRITONSERVER_MetricFamily` and `TRITONSERVER_Metric`: custom counters, gauges and
//! histograms a plugin or backend registers, with string labels (Triton's local cache
//! plugin publishes its `nv_cache_*` gauges this way, Triton's identity backend its
//! per-model counters, python models their `pb_utils.MetricFamily` metrics). Live metrics
//! are kept in one registry that the metrics endpoint renders.
#![allow(unsafe_code)]

mod args;

pub use args::{
    TRITONSERVER_MetricArgs, TRITONSERVER_MetricArgsDelete, TRITONSERVER_MetricArgsNew,
    TRITONSERVER_MetricArgsSetHistogram,
};

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use nereid_core::metrics::text::{Family, Kind};
use nereid_core::stats::histogram::Histogram;

use crate::error::{internal, invalid_arg, unsupported, ErrorPtr};
use crate::ffi;
use crate::inprocess::parameter::{TRITONSERVER_Parameter, Value};

/// `TRITONSERVER_MetricKind` values.
pub mod kind {
    /// `TRITONSERVER_METRIC_KIND_COUNTER`
    pub const COUNTER: u32 = 0;
    /// `TRITONSERVER_METRIC_KIND_GAUGE`
    pub const GAUGE: u32 = 1;
    /// `TRITONSERVER_METRIC_KIND_HISTOGRAM`
    pub const HISTOGRAM: u32 = 2;
}

/// A family as the registry keeps it.
struct FamilyEntry {
    kind: u32,
    name: String,
    description: String,
    /// Per metric: its labels sorted by name (as prometheus-cpp writes them) and its
    /// series.
    metrics: BTreeMap<u64, (Labels, Arc<Series>)>,
}

/// A metric's labels: names and values as the caller gave them, sorted by name.
type Labels = Vec<(String, String)>;

/// What one series holds.
enum Series {
    /// A counter's or gauge's value, as `f64` bits.
    Value(AtomicU64),
    /// A histogram's buckets.
    Histogram(Histogram),
}

/// Every live family by id; ids only grow, so rendering order is creation order.
struct Registry {
    next_id: u64,
    families: BTreeMap<u64, FamilyEntry>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next_id: 1,
    families: BTreeMap::new(),
});

/// The object behind a `TRITONSERVER_MetricFamily*`.
pub struct TRITONSERVER_MetricFamily {
    id: u64,
    kind: u32,
}

/// The object behind a `TRITONSERVER_Metric*`: its series, shared with any other metric
/// of the family with the same labels.
pub struct TRITONSERVER_Metric {
    family: u64,
    id: u64,
    kind: u32,
    series: Arc<Series>,
}

impl TRITONSERVER_Metric {
    /// The counter's or gauge's value, or `what`'s refusal for a histogram.
    fn value(&self, what: &str) -> Result<&AtomicU64, ErrorPtr> {
        match &*self.series {
            Series::Value(value) => Ok(value),
            Series::Histogram(_) => Err(unsupported(format!(
                "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support {what}"
            ))),
        }
    }
}

/// Triton's name of a metric kind, for its messages.
fn kind_name(kind: u32) -> &'static str {
    match kind {
        kind::COUNTER => "TRITONSERVER_METRIC_KIND_COUNTER",
        kind::GAUGE => "TRITONSERVER_METRIC_KIND_GAUGE",
        _ => "TRITONSERVER_METRIC_KIND_HISTOGRAM",
    }
}

/// Appends every live custom metric in Prometheus text format (for `/metrics`).
pub fn render(out: &mut String) {
    let registry = REGISTRY.lock();
    for family in registry.families.values() {
        if family.metrics.is_empty() {
            continue;
        }
        let kind = match family.kind {
            kind::COUNTER => Kind::Counter,
            kind::GAUGE => Kind::Gauge,
            _ => Kind::Histogram,
        };
        let mut text = Family::start(out, &family.name, &family.description, kind);
        // Two handles with the same labels are one series (they share a value).
        let mut written = std::collections::HashSet::new();
        for (labels, series) in family.metrics.values() {
            if !written.insert(labels) {
                continue;
            }
            let labels: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            match &**series {
                Series::Value(value) => {
                    text.sample(&labels, &f64::from_bits(value.load(Ordering::Relaxed)));
                }
                Series::Histogram(histogram) => text.histogram(&labels, &histogram.read()),
            }
        }
    }
}

/// `TRITONSERVER_MetricFamilyNew`: a counter, gauge or histogram family named `name`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricFamilyNew(
    family: *mut *mut TRITONSERVER_MetricFamily,
    kind: u32,
    name: *const c_char,
    description: *const c_char,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: C strings from the caller, checked for null by `text`.
        let (name, description) = unsafe {
            (
                ffi::text(name, "name")?,
                ffi::text(description, "description")?,
            )
        };
        if !matches!(kind, kind::COUNTER | kind::GAUGE | kind::HISTOGRAM) {
            return Err(invalid_arg(format!("Unknown metric kind: {kind}")));
        }
        if family.is_null() {
            return Err(invalid_arg("family must not be null"));
        }
        let mut registry = REGISTRY.lock();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.families.insert(
            id,
            FamilyEntry {
                kind,
                name: name.to_string(),
                description: description.to_string(),
                metrics: BTreeMap::new(),
            },
        );
        let created = Box::into_raw(Box::new(TRITONSERVER_MetricFamily { id, kind }));
        // SAFETY: non-null out-parameter (checked above).
        unsafe { ffi::write(family, created, "family") }
    })
}

/// `TRITONSERVER_MetricFamilyDelete`: frees a family whose metrics were all deleted.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricFamilyDelete(
    family: *mut TRITONSERVER_MetricFamily,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a family from `TRITONSERVER_MetricFamilyNew`, or null (checked).
        let id = unsafe { ffi::reference(family, "family") }?.id;
        let mut registry = REGISTRY.lock();
        if registry
            .families
            .get(&id)
            .is_some_and(|f| !f.metrics.is_empty())
        {
            return Err(internal(
                "Must call MetricDelete on all dependent metrics before calling MetricFamilyDelete.",
            ));
        }
        registry.families.remove(&id);
        // SAFETY: owned by the caller, who gives it up here.
        drop(unsafe { Box::from_raw(family) });
        Ok(())
    })
}

/// The labels, sorted by name (as prometheus-cpp writes them). Each label is a STRING
/// parameter.
///
/// # Safety
/// `labels` holds `count` pointers to `TRITONSERVER_Parameter`s (or is null when 0).
unsafe fn read_labels(
    labels: *const *const TRITONSERVER_Parameter,
    count: u64,
) -> Result<Labels, ErrorPtr> {
    if count == 0 {
        return Ok(Labels::new());
    }
    if labels.is_null() {
        return Err(invalid_arg(
            "labels must not be null when label_count is not 0",
        ));
    }
    let count = usize::try_from(count).map_err(|_| invalid_arg("label_count is too large"))?;
    let mut sorted = BTreeMap::new();
    for i in 0..count {
        // SAFETY: the caller passes `count` parameter pointers; each is checked for null.
        let label = unsafe { ffi::reference(*labels.add(i), "label") }?;
        let Value::String(value) = &label.value else {
            return Err(invalid_arg(format!(
                "metric label '{}' must be a string",
                label.name()
            )));
        };
        sorted.insert(label.name(), value.to_string_lossy().into_owned());
    }
    Ok(sorted
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect())
}

/// Writes the kind `kind_of` reads from `object` (a family or a metric, named `what`)
/// through the out-parameter `kind`.
///
/// # Safety
/// `object` is null or a live object of its type; `kind` is null or writable.
unsafe fn write_kind<T>(
    object: *const T,
    what: &str,
    kind_of: fn(&T) -> u32,
    kind: *mut u32,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: as the caller guarantees; null is checked by `reference` and `write`.
        unsafe {
            let object = ffi::reference(object, what)?;
            ffi::write(kind, kind_of(object), "kind")
        }
    })
}

/// `TRITONSERVER_GetMetricFamilyKind`: the family's kind.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_GetMetricFamilyKind(
    family: *mut TRITONSERVER_MetricFamily,
    kind: *mut u32,
) -> ErrorPtr {
    // SAFETY: a family from `TRITONSERVER_MetricFamilyNew` or null, and the caller's
    // out-parameter.
    unsafe { write_kind(family, "family", |family| family.kind, kind) }
}

/// `TRITONSERVER_MetricNew`: [`TRITONSERVER_MetricNewWithArgs`] without arguments (a
/// counter or gauge).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricNew(
    metric: *mut *mut TRITONSERVER_Metric,
    family: *mut TRITONSERVER_MetricFamily,
    labels: *const *const TRITONSERVER_Parameter,
    label_count: u64,
) -> ErrorPtr {
    // SAFETY: the caller's pointers, passed on under the same contract.
    unsafe { TRITONSERVER_MetricNewWithArgs(metric, family, labels, label_count, std::ptr::null()) }
}

/// The series a new metric of a `kind` family starts, from its `args` (none for a counter
/// or gauge, a histogram's bounds for a histogram), refused as Triton refuses them.
fn new_series(kind: u32, args: Option<&TRITONSERVER_MetricArgs>) -> Result<Series, ErrorPtr> {
    match (kind, args) {
        (kind::HISTOGRAM, None) => Err(invalid_arg("Bucket boundaries not found in Metric args.")),
        (kind::HISTOGRAM, Some(args)) => {
            let bounds = args
                .histogram
                .clone()
                .ok_or_else(|| invalid_arg("Metric args not set to histogram kind."))?;
            // prometheus-cpp's message, which Triton passes on.
            let histogram = Histogram::new(bounds)
                .map_err(|_| invalid_arg("Bucket Boundaries must be strictly sorted"))?;
            Ok(Series::Histogram(histogram))
        }
        (_, None) => Ok(Series::Value(AtomicU64::new(0f64.to_bits()))),
        (kind, Some(_)) => {
            let which = if kind == kind::COUNTER {
                "counter"
            } else {
                "gauge"
            };
            Err(invalid_arg(format!(
                "Unexpected args found in {which} Metric constructor."
            )))
        }
    }
}

/// `TRITONSERVER_MetricNewWithArgs`: a metric of `family` with string `labels`, starting
/// at 0 (a histogram with the bounds in `args`); a second metric with the same labels
/// shares the first one's series, as in Triton.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricNewWithArgs(
    metric: *mut *mut TRITONSERVER_Metric,
    family: *mut TRITONSERVER_MetricFamily,
    labels: *const *const TRITONSERVER_Parameter,
    label_count: u64,
    args: *const TRITONSERVER_MetricArgs,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a family from `TRITONSERVER_MetricFamilyNew`, or null (checked).
        let family = unsafe { ffi::reference(family, "family") }?;
        if metric.is_null() {
            return Err(invalid_arg("metric must not be null"));
        }
        // SAFETY: arguments from `TRITONSERVER_MetricArgsNew`, or null (none).
        let args = unsafe { args.as_ref() };
        // Checked whether or not a series with these labels exists, as Triton does.
        if family.kind == kind::HISTOGRAM || args.is_some() {
            new_series(family.kind, args)?;
        }
        // SAFETY: as the header requires, `label_count` parameters (checked for null).
        let labels = unsafe { read_labels(labels, label_count) }?;
        let mut registry = REGISTRY.lock();
        let id = registry.next_id;
        registry.next_id += 1;
        let entry = registry
            .families
            .get_mut(&family.id)
            .ok_or_else(|| invalid_arg("family was deleted"))?;
        let existing = entry
            .metrics
            .values()
            .find(|(existing, _)| *existing == labels)
            .map(|(_, series)| Arc::clone(series));
        let series = match existing {
            Some(series) => series,
            None => Arc::new(new_series(family.kind, args)?),
        };
        entry.metrics.insert(id, (labels, Arc::clone(&series)));
        let created = Box::into_raw(Box::new(TRITONSERVER_Metric {
            family: family.id,
            id,
            kind: family.kind,
            series,
        }));
        // SAFETY: non-null out-parameter (checked above).
        unsafe { ffi::write(metric, created, "metric") }
    })
}

/// `TRITONSERVER_MetricDelete`: frees a metric and removes it from `/metrics`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricDelete(metric: *mut TRITONSERVER_Metric) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a metric from `TRITONSERVER_MetricNew`, or null (checked).
        let found = unsafe { ffi::reference(metric, "metric") }?;
        if let Some(family) = REGISTRY.lock().families.get_mut(&found.family) {
            family.metrics.remove(&found.id);
        }
        // SAFETY: owned by the caller, who gives it up here.
        drop(unsafe { Box::from_raw(metric) });
        Ok(())
    })
}

/// `TRITONSERVER_MetricValue`: the metric's current value.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricValue(
    metric: *mut TRITONSERVER_Metric,
    value: *mut f64,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a metric from `TRITONSERVER_MetricNew`, or null (checked); the
        // out-parameter is checked by `write`.
        unsafe {
            let metric = ffi::reference(metric, "metric")?;
            let current = f64::from_bits(metric.value("Value")?.load(Ordering::Relaxed));
            ffi::write(value, current, "value")
        }
    })
}

/// `TRITONSERVER_MetricIncrement`: adds `value` (counters only go up).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricIncrement(
    metric: *mut TRITONSERVER_Metric,
    value: f64,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a metric from `TRITONSERVER_MetricNew`, or null (checked).
        let metric = unsafe { ffi::reference(metric, "metric") }?;
        let series = metric.value("Increment")?;
        if metric.kind == kind::COUNTER && value < 0.0 {
            return Err(invalid_arg("TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values."));
        }
        let _ = series.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + value).to_bits())
        });
        Ok(())
    })
}

/// `TRITONSERVER_MetricSet`: sets a gauge to `value` (counters cannot be set).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricSet(
    metric: *mut TRITONSERVER_Metric,
    value: f64,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a metric from `TRITONSERVER_MetricNew`, or null (checked).
        let metric = unsafe { ffi::reference(metric, "metric") }?;
        let series = metric.value("Set")?;
        if metric.kind == kind::COUNTER {
            return Err(unsupported(
                "TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
            ));
        }
        series.store(value.to_bits(), Ordering::Relaxed);
        Ok(())
    })
}

/// `TRITONSERVER_MetricObserve`: counts `value` into a histogram (only histograms observe).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricObserve(
    metric: *mut TRITONSERVER_Metric,
    value: f64,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a metric from `TRITONSERVER_MetricNew`, or null (checked).
        let metric = unsafe { ffi::reference(metric, "metric") }?;
        match &*metric.series {
            Series::Histogram(histogram) => {
                histogram.observe(value);
                Ok(())
            }
            Series::Value(_) => Err(unsupported(format!(
                "{} does not support Observe",
                kind_name(metric.kind)
            ))),
        }
    })
}

/// `TRITONSERVER_GetMetricKind`: the kind of the metric's family.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_GetMetricKind(
    metric: *mut TRITONSERVER_Metric,
    kind: *mut u32,
) -> ErrorPtr {
    // SAFETY: a metric from `TRITONSERVER_MetricNew` or null, and the caller's
    // out-parameter.
    unsafe { write_kind(metric, "metric", |metric| metric.kind, kind) }
}

#[cfg(test)]
mod tests {
    use std::ptr::null_mut;

    use super::*;
    use crate::error::TRITONSERVER_ErrorDelete;

    #[test]
    fn a_description_with_a_newline_or_backslash_keeps_the_scrape_whole() {
        let (mut family, mut metric) = (null_mut(), null_mut());
        // SAFETY: objects created, used and deleted here, in order.
        unsafe {
            let created = TRITONSERVER_MetricFamilyNew(
                &mut family,
                kind::COUNTER,
                c"nereid_test_hostile_help".as_ptr(),
                c"first line\nsecond \\ line \"quoted\"".as_ptr(),
            );
            assert!(created.is_null());
            assert!(TRITONSERVER_MetricNew(&mut metric, family, std::ptr::null(), 0).is_null());
            let mut text = String::new();
            render(&mut text);
            assert!(
                text.contains("# HELP nereid_test_hostile_help first line\\nsecond \\\\ line \"quoted\"\n# TYPE nereid_test_hostile_help counter\n"),
                "{text}"
            );
            assert!(TRITONSERVER_MetricDelete(metric).is_null());
            assert!(TRITONSERVER_MetricFamilyDelete(family).is_null());
        }
    }

    #[test]
    fn gauges_are_rendered_until_deleted() {
        let (mut family, mut metric) = (null_mut(), null_mut());
        // SAFETY: objects created, used and deleted here, in order.
        unsafe {
            let created = TRITONSERVER_MetricFamilyNew(
                &mut family,
                kind::GAUGE,
                c"nereid_test_gauge".as_ptr(),
                c"A test gauge".as_ptr(),
            );
            assert!(created.is_null());
            assert!(TRITONSERVER_MetricNew(&mut metric, family, std::ptr::null(), 0).is_null());
            assert!(TRITONSERVER_MetricSet(metric, 2.5).is_null());
            assert!(TRITONSERVER_MetricIncrement(metric, 1.0).is_null());
            let mut text = String::new();
            render(&mut text);
            assert!(text.contains("# TYPE nereid_test_gauge gauge\nnereid_test_gauge 3.5\n"));
            let busy = TRITONSERVER_MetricFamilyDelete(family);
            assert!(!busy.is_null(), "a family with live metrics stays");
            TRITONSERVER_ErrorDelete(busy);
            assert!(TRITONSERVER_MetricDelete(metric).is_null());
            assert!(TRITONSERVER_MetricFamilyDelete(family).is_null());
            let mut text = String::new();
            render(&mut text);
            assert!(!text.contains("nereid_test_gauge"));
        }
    }

    #[test]
    fn labelled_metrics_are_series_of_their_family() {
        use crate::inprocess::parameter::TRITONSERVER_ParameterNew;
        let (mut family, mut a, mut b, mut again) =
            (null_mut(), null_mut(), null_mut(), null_mut());
        // SAFETY: objects created, used and deleted here, in order; string values as the
        // header describes them (type 0, a C string).
        unsafe {
            let label = |name: &std::ffi::CStr, value: &std::ffi::CStr| {
                TRITONSERVER_ParameterNew(name.as_ptr(), 0, value.as_ptr().cast()).cast_const()
            };
            assert!(TRITONSERVER_MetricFamilyNew(
                &mut family,
                kind::COUNTER,
                c"nereid_test_labelled".as_ptr(),
                c"Labelled".as_ptr(),
            )
            .is_null());
            let first = [label(c"model", c"m"), label(c"version", c"1")];
            let second = [label(c"version", c"2"), label(c"model", c"say \"hi\"")];
            assert!(TRITONSERVER_MetricNew(&mut a, family, first.as_ptr(), 2).is_null());
            assert!(TRITONSERVER_MetricNew(&mut b, family, second.as_ptr(), 2).is_null());
            assert!(TRITONSERVER_MetricNew(&mut again, family, first.as_ptr(), 2).is_null());
            assert!(TRITONSERVER_MetricIncrement(a, 2.0).is_null());
            assert!(TRITONSERVER_MetricIncrement(again, 1.0).is_null());
            assert!(TRITONSERVER_MetricIncrement(b, 5.0).is_null());
            let mut text = String::new();
            render(&mut text);
            assert!(
                text.contains("nereid_test_labelled{model=\"m\",version=\"1\"} 3\n"),
                "{text}"
            );
            assert!(
                text.contains("nereid_test_labelled{model=\"say \\\"hi\\\"\",version=\"2\"} 5\n"),
                "{text}"
            );
            assert_eq!(text.matches("nereid_test_labelled{").count(), 2, "{text}");
            let not_text =
                [
                    TRITONSERVER_ParameterNew(c"n".as_ptr(), 1, (&7i64 as *const i64).cast())
                        .cast_const(),
                ];
            let refused = TRITONSERVER_MetricNew(&mut a, family, not_text.as_ptr(), 1);
            assert!(!refused.is_null());
            TRITONSERVER_ErrorDelete(refused);
            for metric in [a, b, again] {
                assert!(TRITONSERVER_MetricDelete(metric).is_null());
            }
            assert!(TRITONSERVER_MetricFamilyDelete(family).is_null());
        }
    }

    #[test]
    fn histograms_observe_into_their_buckets_and_refuse_the_rest() {
        use crate::error::{TRITONSERVER_ErrorCode, TRITONSERVER_Error_Code as Code};
        let (mut family, mut args, mut metric, mut plain) =
            (null_mut(), null_mut(), null_mut(), null_mut());
        let code = |error: ErrorPtr| {
            assert!(!error.is_null(), "refused");
            // SAFETY: a live error from the call just made, deleted once read.
            unsafe {
                let code = TRITONSERVER_ErrorCode(error);
                TRITONSERVER_ErrorDelete(error);
                code
            }
        };
        // SAFETY: objects created, used and deleted here, in order.
        unsafe {
            assert!(TRITONSERVER_MetricFamilyNew(
                &mut family,
                kind::HISTOGRAM,
                c"nereid_test_histogram".as_ptr(),
                c"Latency".as_ptr(),
            )
            .is_null());
            let mut seen = 9;
            assert!(TRITONSERVER_GetMetricFamilyKind(family, &mut seen).is_null());
            assert_eq!(seen, kind::HISTOGRAM);
            // No bounds, bounds out of order: refused as invalid arguments.
            assert_eq!(
                code(TRITONSERVER_MetricNew(
                    &mut metric,
                    family,
                    std::ptr::null(),
                    0
                )),
                Code::InvalidArg
            );
            assert!(TRITONSERVER_MetricArgsNew(&mut args).is_null());
            assert_eq!(
                code(TRITONSERVER_MetricNewWithArgs(
                    &mut metric,
                    family,
                    std::ptr::null(),
                    0,
                    args
                )),
                Code::InvalidArg,
                "arguments without bounds"
            );
            let unsorted = [2.5, 0.1];
            assert!(TRITONSERVER_MetricArgsSetHistogram(args, unsorted.as_ptr(), 2).is_null());
            assert_eq!(
                code(TRITONSERVER_MetricNewWithArgs(
                    &mut metric,
                    family,
                    std::ptr::null(),
                    0,
                    args
                )),
                Code::InvalidArg
            );
            let bounds = [0.1, 1.0];
            assert!(TRITONSERVER_MetricArgsSetHistogram(args, bounds.as_ptr(), 2).is_null());
            assert!(
                TRITONSERVER_MetricNewWithArgs(&mut metric, family, std::ptr::null(), 0, args)
                    .is_null()
            );
            for value in [0.05, 0.5, 7.0] {
                assert!(TRITONSERVER_MetricObserve(metric, value).is_null());
            }
            let mut value = 0.0;
            assert_eq!(
                code(TRITONSERVER_MetricValue(metric, &mut value)),
                Code::Unsupported
            );
            assert_eq!(
                code(TRITONSERVER_MetricIncrement(metric, 1.0)),
                Code::Unsupported
            );
            assert_eq!(code(TRITONSERVER_MetricSet(metric, 1.0)), Code::Unsupported);
            let mut text = String::new();
            render(&mut text);
            assert!(
                text.contains(
                    "# TYPE nereid_test_histogram histogram\nnereid_test_histogram_count 3\n\
                     nereid_test_histogram_sum 7.55\nnereid_test_histogram_bucket{le=\"0.1\"} 1\n\
                     nereid_test_histogram_bucket{le=\"1\"} 2\n\
                     nereid_test_histogram_bucket{le=\"+Inf\"} 3\n"
                ),
                "{text}"
            );
            // A gauge takes no arguments and does not observe.
            let mut gauges = null_mut();
            assert!(TRITONSERVER_MetricFamilyNew(
                &mut gauges,
                kind::GAUGE,
                c"nereid_test_not_histogram".as_ptr(),
                c"Gauge".as_ptr(),
            )
            .is_null());
            assert_eq!(
                code(TRITONSERVER_MetricNewWithArgs(
                    &mut plain,
                    gauges,
                    std::ptr::null(),
                    0,
                    args
                )),
                Code::InvalidArg
            );
            assert!(TRITONSERVER_MetricNew(&mut plain, gauges, std::ptr::null(), 0).is_null());
            assert_eq!(
                code(TRITONSERVER_MetricObserve(plain, 1.0)),
                Code::Unsupported
            );
            assert!(TRITONSERVER_MetricArgsDelete(args).is_null());
            assert!(TRITONSERVER_MetricArgsDelete(null_mut()).is_null());
            for (metric, family) in [(metric, family), (plain, gauges)] {
                assert!(TRITONSERVER_MetricDelete(metric).is_null());
                assert!(TRITONSERVER_MetricFamilyDelete(family).is_null());
            }
        }
    }
}
