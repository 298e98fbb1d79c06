//! `TRITONSERVER_MetricFamily` and `TRITONSERVER_Metric`: custom counters and gauges a
//! plugin or backend registers, with string labels (Triton's local cache plugin publishes
//! its `nv_cache_*` gauges this way, Triton's identity backend its per-model counters).
//! Live metrics are kept in one registry that the metrics endpoint renders.

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

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
    /// Per metric: its labels as Prometheus writes them (`{a="1",b="2"}`, or empty) and
    /// its value.
    metrics: BTreeMap<u64, (String, Arc<AtomicU64>)>,
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

/// The object behind a `TRITONSERVER_Metric*`: its value as `f64` bits.
pub struct TRITONSERVER_Metric {
    family: u64,
    id: u64,
    kind: u32,
    value: Arc<AtomicU64>,
}

/// Appends every live custom metric in Prometheus text format (for `/metrics`).
pub fn render(out: &mut String) {
    let registry = REGISTRY.lock();
    for family in registry.families.values() {
        if family.metrics.is_empty() {
            continue;
        }
        let kind = if family.kind == kind::COUNTER {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(out, "# HELP {} {}", family.name, family.description);
        let _ = writeln!(out, "# TYPE {} {kind}", family.name);
        // Two handles with the same labels are one series (they share a value).
        let mut written = std::collections::HashSet::new();
        for (labels, value) in family.metrics.values() {
            if !written.insert(labels.as_str()) {
                continue;
            }
            let value = f64::from_bits(value.load(Ordering::Relaxed));
            let _ = writeln!(out, "{}{labels} {value}", family.name);
        }
    }
}

/// `TRITONSERVER_MetricFamilyNew`: a counter or gauge family named `name`. Histograms
/// are not supported.
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
        match kind {
            kind::COUNTER | kind::GAUGE => {}
            kind::HISTOGRAM => {
                return Err(unsupported("histogram metrics are not supported by Nereid"))
            }
            other => return Err(invalid_arg(format!("Unknown metric kind: {other}"))),
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

/// The labels' Prometheus text, `{key="value",...}` sorted by key (as prometheus-cpp
/// writes them), or empty without labels. Each label is a STRING parameter.
///
/// # Safety
/// `labels` holds `count` pointers to `TRITONSERVER_Parameter`s (or is null when 0).
unsafe fn label_text(
    labels: *const *const TRITONSERVER_Parameter,
    count: u64,
) -> Result<String, ErrorPtr> {
    if count == 0 {
        return Ok(String::new());
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
    let mut text = String::from("{");
    for (i, (key, value)) in sorted.iter().enumerate() {
        let escaped = value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let comma = if i > 0 { "," } else { "" };
        let _ = write!(text, "{comma}{key}=\"{escaped}\"");
    }
    text.push('}');
    Ok(text)
}

/// `TRITONSERVER_MetricNew`: a metric of `family` with string `labels`, starting at 0; a
/// second metric with the same labels shares the first one's value, as in Triton.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricNew(
    metric: *mut *mut TRITONSERVER_Metric,
    family: *mut TRITONSERVER_MetricFamily,
    labels: *const *const TRITONSERVER_Parameter,
    label_count: u64,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a family from `TRITONSERVER_MetricFamilyNew`, or null (checked).
        let family = unsafe { ffi::reference(family, "family") }?;
        if metric.is_null() {
            return Err(invalid_arg("metric must not be null"));
        }
        // SAFETY: as the header requires, `label_count` parameters (checked for null).
        let labels = unsafe { label_text(labels, label_count) }?;
        let mut registry = REGISTRY.lock();
        let id = registry.next_id;
        registry.next_id += 1;
        let entry = registry
            .families
            .get_mut(&family.id)
            .ok_or_else(|| invalid_arg("family was deleted"))?;
        let value = entry
            .metrics
            .values()
            .find(|(existing, _)| *existing == labels)
            .map(|(_, value)| Arc::clone(value))
            .unwrap_or_else(|| Arc::new(AtomicU64::new(0f64.to_bits())));
        entry.metrics.insert(id, (labels, Arc::clone(&value)));
        let created = Box::into_raw(Box::new(TRITONSERVER_Metric {
            family: family.id,
            id,
            kind: family.kind,
            value,
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
            let current = f64::from_bits(metric.value.load(Ordering::Relaxed));
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
        if metric.kind == kind::COUNTER && value < 0.0 {
            return Err(invalid_arg("TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values."));
        }
        let _ = metric
            .value
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
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
        if metric.kind == kind::COUNTER {
            return Err(unsupported(
                "TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
            ));
        }
        metric.value.store(value.to_bits(), Ordering::Relaxed);
        Ok(())
    })
}

/// `TRITONSERVER_GetMetricKind`: the kind of the metric's family.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_GetMetricKind(
    metric: *mut TRITONSERVER_Metric,
    kind: *mut u32,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a metric from `TRITONSERVER_MetricNew`, or null (checked); the
        // out-parameter is checked by `write`.
        unsafe {
            let metric = ffi::reference(metric, "metric")?;
            ffi::write(kind, metric.kind, "kind")
        }
    })
}

#[cfg(test)]
mod tests {
    use std::ptr::null_mut;

    use super::*;
    use crate::error::TRITONSERVER_ErrorDelete;

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
}
