//! `TRITONSERVER_MetricArgs`: what a metric needs beyond its family and labels — for a
//! histogram, its bucket bounds (`TRITONSERVER_MetricNewWithArgs`).
#![allow(unsafe_code)]

use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi;

/// The object behind a `TRITONSERVER_MetricArgs*`: histogram bounds once set.
#[derive(Debug, Default)]
pub struct TRITONSERVER_MetricArgs {
    /// The bounds given by `TRITONSERVER_MetricArgsSetHistogram`, unchecked until a
    /// histogram is made with them.
    pub histogram: Option<Vec<f64>>,
}

/// `TRITONSERVER_MetricArgsNew`: empty arguments.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricArgsNew(
    args: *mut *mut TRITONSERVER_MetricArgs,
) -> ErrorPtr {
    ffi::status(|| {
        if args.is_null() {
            return Err(invalid_arg("args must not be null"));
        }
        let created = Box::into_raw(Box::default());
        // SAFETY: non-null out-parameter (checked above).
        unsafe { ffi::write(args, created, "args") }
    })
}

/// `TRITONSERVER_MetricArgsSetHistogram`: makes the arguments a histogram's with the
/// `count` bucket bounds at `buckets` (null allowed when there are none).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricArgsSetHistogram(
    args: *mut TRITONSERVER_MetricArgs,
    buckets: *const f64,
    count: u64,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: arguments from `TRITONSERVER_MetricArgsNew`, or null (checked).
        let args = unsafe { ffi::reference_mut(args, "args") }?;
        let count =
            usize::try_from(count).map_err(|_| invalid_arg("buckets_count is too large"))?;
        let bounds = if count == 0 {
            Vec::new()
        } else if buckets.is_null() {
            return Err(invalid_arg(
                "buckets must not be null when buckets_count is not 0",
            ));
        } else {
            // SAFETY: the caller passes `count` doubles at `buckets` (non-null, checked).
            unsafe { std::slice::from_raw_parts(buckets, count) }.to_vec()
        };
        args.histogram = Some(bounds);
        Ok(())
    })
}

/// `TRITONSERVER_MetricArgsDelete`: frees the arguments; null is nothing to free (Triton's
/// python backend passes the null it made no arguments for after a counter or gauge).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_MetricArgsDelete(
    args: *mut TRITONSERVER_MetricArgs,
) -> ErrorPtr {
    ffi::status(|| {
        if !args.is_null() {
            // SAFETY: owned by the caller, who gives it up here.
            drop(unsafe { Box::from_raw(args) });
        }
        Ok(())
    })
}
