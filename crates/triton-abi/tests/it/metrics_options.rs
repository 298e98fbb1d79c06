//! `TRITONSERVER_ServerOptionsSetMetricsConfig` and `SetMetricsInterval`: checked as
//! `--metrics-config` and `--metrics-interval-ms` are, refused with Triton's error codes;
//! their effect on a running server is checked in `decoupled`. And what
//! `TRITONSERVER_ServerMetrics` shows right after start.

use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};

use tritonserver::error::{
    ErrorPtr, TRITONSERVER_ErrorCode, TRITONSERVER_ErrorDelete, TRITONSERVER_ErrorMessage,
    TRITONSERVER_Error_Code,
};
use tritonserver::inprocess::metrics::*;
use tritonserver::inprocess::options::*;
use tritonserver::inprocess::server::{
    TRITONSERVER_Server, TRITONSERVER_ServerDelete, TRITONSERVER_ServerStop,
};
use tritonserver::inprocess::start::TRITONSERVER_ServerNew;
use tritonserver::metrics::{
    TRITONSERVER_MetricDelete, TRITONSERVER_MetricFamilyDelete, TRITONSERVER_MetricFamilyNew,
    TRITONSERVER_MetricIncrement, TRITONSERVER_MetricNew,
};

/// The code and message of `error`, freed (`None` for success).
fn outcome(error: ErrorPtr) -> Option<(TRITONSERVER_Error_Code, String)> {
    if error.is_null() {
        return None;
    }
    // SAFETY: an error this library returned; read, then freed.
    unsafe {
        let code = TRITONSERVER_ErrorCode(error);
        let message = CStr::from_ptr(TRITONSERVER_ErrorMessage(error))
            .to_string_lossy()
            .into_owned();
        TRITONSERVER_ErrorDelete(error);
        Some((code, message))
    }
}

/// The server's metrics as `TRITONSERVER_ServerMetrics` formats them.
pub fn metrics_text(server: *mut TRITONSERVER_Server) -> String {
    let mut metrics = null_mut();
    let (mut base, mut size) = (null(), 0usize);
    // SAFETY: a live server and valid out-parameters; the text holds `size` bytes until
    // the snapshot is deleted.
    unsafe {
        assert_eq!(
            outcome(TRITONSERVER_ServerMetrics(server, &mut metrics)),
            None
        );
        assert_eq!(
            outcome(TRITONSERVER_MetricsFormatted(
                metrics, 0, &mut base, &mut size
            )),
            None
        );
        let text = String::from_utf8_lossy(std::slice::from_raw_parts(base.cast::<u8>(), size))
            .into_owned();
        assert_eq!(outcome(TRITONSERVER_MetricsDelete(metrics)), None);
        text
    }
}

#[test]
fn bad_metrics_settings_are_refused_with_invalid_arg() {
    let mut options = null_mut();
    // SAFETY: valid options and NUL-terminated strings, or null where the test says so.
    unsafe {
        assert_eq!(outcome(TRITONSERVER_ServerOptionsNew(&mut options)), None);
        let set = |name: *const c_char, setting: *const c_char, value: *const c_char| {
            outcome(TRITONSERVER_ServerOptionsSetMetricsConfig(
                options, name, setting, value,
            ))
        };
        assert_eq!(
            set(
                c"".as_ptr(),
                c"histogram_latencies".as_ptr(),
                c"true".as_ptr()
            ),
            None
        );
        assert_eq!(
            set(
                c"".as_ptr(),
                c"summary_quantiles".as_ptr(),
                c"0.5:0.05,0.9:0.01".as_ptr()
            ),
            None
        );
        // Another group's settings are stored unread by Triton: accepted, ignored.
        assert_eq!(
            set(
                c"metrics_group".as_ptr(),
                c"setting".as_ptr(),
                c"value".as_ptr()
            ),
            None
        );
        for (name, setting, value, expected) in [
            (
                c"".as_ptr(),
                c"summary_latencies".as_ptr(),
                c"yes".as_ptr(),
                "metrics config summary_latencies=yes: expected true or false",
            ),
            (
                c"".as_ptr(),
                c"histogram_buckets".as_ptr(),
                c"1".as_ptr(),
                "unknown setting 'histogram_buckets'",
            ),
            (
                c"".as_ptr(),
                c"summary_quantiles".as_ptr(),
                c"2:0.1".as_ptr(),
                "the quantile must be in [0, 1]",
            ),
            (
                null(),
                c"summary_latencies".as_ptr(),
                c"true".as_ptr(),
                "name must not be null",
            ),
            (
                c"".as_ptr(),
                null(),
                c"true".as_ptr(),
                "setting must not be null",
            ),
            (
                c"".as_ptr(),
                c"summary_latencies".as_ptr(),
                null(),
                "value must not be null",
            ),
        ] {
            let (code, message) = set(name, setting, value).expect("refused");
            assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg, "{message}");
            assert!(message.contains(expected), "{message}");
        }
        let null_options = TRITONSERVER_ServerOptionsSetMetricsConfig(
            null_mut(),
            c"".as_ptr(),
            c"summary_latencies".as_ptr(),
            c"true".as_ptr(),
        );
        let (code, _) = outcome(null_options).expect("refused");
        assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg);

        assert_eq!(
            outcome(TRITONSERVER_ServerOptionsSetMetricsInterval(options, 250)),
            None
        );
        let (code, message) =
            outcome(TRITONSERVER_ServerOptionsSetMetricsInterval(options, 0)).expect("refused");
        assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg);
        assert_eq!(message, "metrics interval must be greater than 0");
        let (code, _) =
            outcome(TRITONSERVER_ServerOptionsSetMetricsInterval(null_mut(), 5)).expect("refused");
        assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg);
        assert_eq!(outcome(TRITONSERVER_ServerOptionsDelete(options)), None);
    }
}

/// Triton registers the CPU gauges at start and keeps custom metrics in the one registry
/// its metrics text is written from: both show in a snapshot taken right after
/// `TRITONSERVER_ServerNew` (Triton's L0_python_api `test_metrics`, `test_custom_metric`).
#[test]
fn metrics_right_after_start_show_the_cpu_gauges_and_custom_metrics() {
    let repository = tempfile::tempdir().expect("temporary directory");
    let path =
        std::ffi::CString::new(repository.path().to_string_lossy().as_bytes()).expect("no NUL");
    let (mut options, mut server) = (null_mut(), null_mut());
    let (mut family, mut metric) = (null_mut(), null_mut());
    // SAFETY: valid pointers and NUL-terminated strings throughout; each object is
    // deleted once, after its last use.
    unsafe {
        assert_eq!(outcome(TRITONSERVER_ServerOptionsNew(&mut options)), None);
        assert_eq!(
            outcome(TRITONSERVER_ServerOptionsSetModelRepositoryPath(
                options,
                path.as_ptr()
            )),
            None
        );
        // EXPLICIT: nothing is loaded, no backend is needed.
        assert_eq!(
            outcome(TRITONSERVER_ServerOptionsSetModelControlMode(options, 2)),
            None
        );
        assert_eq!(outcome(TRITONSERVER_ServerNew(&mut server, options)), None);
        assert_eq!(outcome(TRITONSERVER_ServerOptionsDelete(options)), None);
        if std::path::Path::new("/proc/meminfo").exists() {
            let text = metrics_text(server);
            assert!(text.contains("\nnv_cpu_memory_used_bytes "), "{text}");
        }

        assert_eq!(
            outcome(TRITONSERVER_MetricFamilyNew(
                &mut family,
                0, // TRITONSERVER_METRIC_KIND_COUNTER
                c"nereid_it_started_counter".as_ptr(),
                c"a custom counter".as_ptr(),
            )),
            None
        );
        assert_eq!(
            outcome(TRITONSERVER_MetricNew(&mut metric, family, null(), 0)),
            None
        );
        assert_eq!(outcome(TRITONSERVER_MetricIncrement(metric, 2.0)), None);
        let text = metrics_text(server);
        assert!(text.contains("\nnereid_it_started_counter 2\n"), "{text}");

        assert_eq!(outcome(TRITONSERVER_MetricDelete(metric)), None);
        assert_eq!(outcome(TRITONSERVER_MetricFamilyDelete(family)), None);
        assert_eq!(outcome(TRITONSERVER_ServerStop(server)), None);
        assert_eq!(outcome(TRITONSERVER_ServerDelete(server)), None);
    }
}
