//! `TRITONSERVER_Metrics`: the server's Prometheus metrics text, as the metrics port
//! would serve it.
#![allow(unsafe_code)]

use std::ffi::c_char;

use super::server::TRITONSERVER_Server;
use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi;

/// The object behind `TRITONSERVER_Metrics*`: a snapshot of the metrics text.
pub struct TRITONSERVER_Metrics {
    text: String,
}

/// `TRITONSERVER_METRIC_PROMETHEUS`
const METRIC_PROMETHEUS: u32 = 0;

/// `TRITONSERVER_ServerMetrics`: a snapshot of the server's metrics.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerMetrics(
    server: *mut TRITONSERVER_Server,
    metrics: *mut *mut TRITONSERVER_Metrics,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live server, or null (checked).
        let server = unsafe { ffi::reference(server, "server") }?;
        if metrics.is_null() {
            return Err(invalid_arg("metrics must not be null"));
        }
        let text = server.engine.metrics_text();
        let created = Box::into_raw(Box::new(TRITONSERVER_Metrics { text }));
        // SAFETY: checked for null above; the caller owns the snapshot.
        unsafe { metrics.write(created) };
        Ok(())
    })
}

/// `TRITONSERVER_MetricsDelete`: frees a snapshot (null is ignored).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricsDelete(
    metrics: *mut TRITONSERVER_Metrics,
) -> ErrorPtr {
    if !metrics.is_null() {
        // SAFETY: created by `TRITONSERVER_ServerMetrics` and owned by the caller.
        drop(unsafe { Box::from_raw(metrics) });
    }
    std::ptr::null_mut()
}

/// `TRITONSERVER_MetricsFormatted`: the snapshot in Prometheus text format, valid until
/// the snapshot is deleted.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricsFormatted(
    metrics: *mut TRITONSERVER_Metrics,
    format: u32,
    base: *mut *const c_char,
    byte_size: *mut usize,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live snapshot, or null (checked).
        let metrics = unsafe { ffi::reference(metrics, "metrics") }?;
        if format != METRIC_PROMETHEUS {
            return Err(invalid_arg(format!("unknown metrics format '{format}'")));
        }
        // SAFETY: out-parameters from the caller, checked for null by `write`.
        unsafe {
            ffi::write(base, metrics.text.as_ptr().cast(), "base")?;
            ffi::write(byte_size, metrics.text.len(), "byte_size")
        }
    })
}
