//! `TRITONBACKEND_ModelInstanceResponseStatistics*`: a backend that streams responses
//! (Triton's square backend, LLM backends) fills one of these per response — its
//! instance, its request's factory, three timestamps and its error — and reports it; the
//! model's statistics count it under the response's index within its request (Triton's
//! `response_stats`).
#![allow(unsafe_code)]

use std::sync::Arc;

use nereid_core::stats::{ModelStats, ResponseOutcome, ResponseTimes};
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::objects::TRITONBACKEND_ModelInstance;
use super::response::TRITONBACKEND_ResponseFactory;
use crate::error::{
    from_core, invalid_arg, ErrorPtr, TRITONSERVER_ErrorCode, TRITONSERVER_Error_Code,
};
use crate::ffi::{self, put};

/// The object behind `TRITONBACKEND_ModelInstanceResponseStatistics*`, owned by the
/// backend from `…New` to `…Delete`.
#[derive(Default)]
pub struct TRITONBACKEND_ModelInstanceResponseStatistics {
    // Set one field at a time through `&self` (the ABI hands out one pointer).
    fields: Mutex<Fields>,
}

#[derive(Default)]
struct Fields {
    stats: Option<Arc<ModelStats>>,
    request: Option<Arc<Exchange>>,
    start: u64,
    compute_output_start: u64,
    end: u64,
    outcome: Option<ResponseOutcome>,
}

fn with_statistics(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
    body: impl FnOnce(&mut Fields) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: an object from `…New` the backend has not deleted, or null (checked).
    unsafe {
        ffi::with(statistics, "response_statistics", |s| {
            body(&mut s.fields.lock())
        })
    }
}

/// `TRITONBACKEND_ModelInstanceResponseStatisticsNew`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsNew(
    statistics: *mut *mut TRITONBACKEND_ModelInstanceResponseStatistics,
) -> ErrorPtr {
    ffi::status(|| {
        let created = Box::new(TRITONBACKEND_ModelInstanceResponseStatistics::default());
        put(statistics, Box::into_raw(created), "response_statistics")
    })
}

/// `TRITONBACKEND_ModelInstanceResponseStatisticsDelete`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsDelete(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
) -> ErrorPtr {
    if !statistics.is_null() {
        // SAFETY: created by `…New` and owned by the backend, which gives it back here.
        drop(unsafe { Box::from_raw(statistics) });
    }
    std::ptr::null_mut()
}

/// `TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
    instance: *mut TRITONBACKEND_ModelInstance,
) -> ErrorPtr {
    with_statistics(statistics, |fields| {
        // SAFETY: a live instance object handed to the backend, or null (checked).
        let instance = unsafe { instance.as_ref() }
            .ok_or_else(|| invalid_arg("model_instance must not be null"))?;
        fields.stats = Some(instance.stats.clone());
        Ok(())
    })
}

/// `TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory`: the request the
/// response belongs to (its factory numbers the responses).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
    factory: *mut TRITONBACKEND_ResponseFactory,
) -> ErrorPtr {
    with_statistics(statistics, |fields| {
        // SAFETY: a live factory the backend created, or null (checked).
        let factory = unsafe { factory.as_ref() }
            .ok_or_else(|| invalid_arg("response_factory must not be null"))?;
        fields.request = Some(factory.exchange().clone());
        Ok(())
    })
}

/// `TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
    response_start: u64,
) -> ErrorPtr {
    with_statistics(statistics, |fields| {
        fields.start = response_start;
        Ok(())
    })
}

/// `TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart`: 0 (the default)
/// for a response without outputs.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
    compute_output_start: u64,
) -> ErrorPtr {
    with_statistics(statistics, |fields| {
        fields.compute_output_start = compute_output_start;
        Ok(())
    })
}

/// `TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
    response_end: u64,
) -> ErrorPtr {
    with_statistics(statistics, |fields| {
        fields.end = response_end;
        Ok(())
    })
}

/// `TRITONBACKEND_ModelInstanceResponseStatisticsSetError`: the response's error (null:
/// none). Only its code is kept, so the backend may delete it before reporting.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceResponseStatisticsSetError(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
    error: ErrorPtr,
) -> ErrorPtr {
    with_statistics(statistics, |fields| {
        fields.outcome = (!error.is_null()).then(|| {
            // SAFETY: a live error the backend created through this library.
            match unsafe { TRITONSERVER_ErrorCode(error) } {
                TRITONSERVER_Error_Code::Cancelled => ResponseOutcome::Cancelled,
                _ => ResponseOutcome::Failed,
            }
        });
        Ok(())
    })
}

/// `TRITONBACKEND_ModelInstanceReportResponseStatistics`: counts the response under the
/// next index of its request. Timestamps out of order are refused, as by Triton.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceReportResponseStatistics(
    statistics: *mut TRITONBACKEND_ModelInstanceResponseStatistics,
) -> ErrorPtr {
    with_statistics(statistics, |fields| {
        let (Some(stats), Some(request)) = (&fields.stats, &fields.request) else {
            return Err(invalid_arg(
                "response statistics need a model instance and a response factory",
            ));
        };
        let times = ResponseTimes {
            start: fields.start,
            compute_output_start: fields.compute_output_start,
            end: fields.end,
        };
        let outcome = fields.outcome.unwrap_or(ResponseOutcome::Sent);
        stats
            .responses()
            .report(request.next_response_index(), outcome, times)
            .map_err(|e| from_core(&e))
    })
}
