//! `TRITONSERVER_InferenceRequest`: the request object a program fills in before
//! `TRITONSERVER_ServerInferAsync`: id, sequence flags and correlation id, priority,
//! timeout, parameters and callbacks. Tensors are in [`super::tensors`].
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use nereid_core::request::ParamValue;
use nereid_proto::inference::model_config::SchedulingChoice;
use nereid_proto::inference::ModelConfig;

use super::allocator::TRITONSERVER_ResponseAllocator;
use super::input::Input;
use super::parameter::c_string;
use super::response::TRITONSERVER_InferenceResponse;
use super::server::{version, TRITONSERVER_Server};
use crate::error::{from_core, invalid_arg, new_error, ErrorPtr, TRITONSERVER_Error_Code};
use crate::ffi;

/// `TRITONSERVER_InferenceRequestReleaseFn_t`.
pub type ReleaseFn = unsafe extern "C" fn(
    request: *mut TRITONSERVER_InferenceRequest,
    flags: u32,
    userp: *mut c_void,
);

/// `TRITONSERVER_InferenceResponseCompleteFn_t`.
pub type ResponseFn = unsafe extern "C" fn(
    response: *mut TRITONSERVER_InferenceResponse,
    flags: u32,
    userp: *mut c_void,
);

/// `TRITONSERVER_REQUEST_FLAG_SEQUENCE_START`
pub const FLAG_SEQUENCE_START: u32 = 1;
/// `TRITONSERVER_REQUEST_FLAG_SEQUENCE_END`
pub const FLAG_SEQUENCE_END: u32 = 2;

/// A request's correlation id: unset, a number or a string (Triton's `SequenceId`).
#[derive(Debug, Clone, PartialEq)]
pub enum Correlation {
    /// An unsigned integer (0 means none).
    Number(u64),
    /// A string (empty means none).
    Text(CString),
}

/// Where and how a request's response is delivered.
#[derive(Clone, Copy)]
pub struct ResponseTarget {
    /// The caller's allocator (may be null when no output is expected).
    pub allocator: *mut TRITONSERVER_ResponseAllocator,
    /// Passed to the allocator's functions.
    pub allocator_userp: *mut c_void,
    /// Receives the response.
    pub complete: ResponseFn,
    /// Passed to `complete`.
    pub userp: *mut c_void,
}

/// A submission's cancellation: `Cancel` sets the flag and wakes the task that waits for
/// the answer, which then answers CANCELLED instead.
#[derive(Default)]
pub struct Cancel {
    cancelled: AtomicBool,
    wake: Notify,
}

impl Cancel {
    /// Marks the submission cancelled.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Whether `cancel` was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once the submission is cancelled.
    pub async fn cancelled(&self) {
        while !self.is_cancelled() {
            self.wake.notified().await;
        }
    }
}

/// Triton's error for cancellation calls before the request was ever submitted.
fn not_submitted(what: &str) -> ErrorPtr {
    new_error(
        TRITONSERVER_Error_Code::Internal,
        format!("It is not possible to {what} before calling TRITONSERVER_InferAsync."),
    )
}

/// The object behind `TRITONSERVER_InferenceRequest*`.
pub struct TRITONSERVER_InferenceRequest {
    /// Target model.
    pub(crate) model_name: String,
    /// Target version; `None` is the latest.
    pub(crate) model_version: Option<i64>,
    pub(crate) id: CString,
    pub(crate) flags: u32,
    pub(crate) correlation: Correlation,
    /// As Triton keeps it: within `1..=max_priority`, else the model's default.
    pub(crate) priority: u64,
    /// The model's `dynamic_batching.priority_levels` (any for an ensemble, 0 otherwise).
    max_priority: u64,
    /// The model's `dynamic_batching.default_priority_level` (0 without levels).
    default_priority: u64,
    pub(crate) timeout_us: u64,
    /// Inputs in the order they were added.
    pub(crate) inputs: Vec<Input>,
    /// Requested outputs in the order they were added.
    pub(crate) requested_outputs: Vec<String>,
    /// `Set*Parameter` values, in order.
    pub(crate) parameters: Vec<(String, ParamValue)>,
    pub(crate) release: Option<(ReleaseFn, *mut c_void)>,
    pub(crate) response: Option<ResponseTarget>,
    /// The cancellation of the latest submission (`None` before the first): shared with
    /// the task waiting for its answer.
    pub(crate) cancel: Option<Arc<Cancel>>,
}

impl TRITONSERVER_InferenceRequest {
    /// Sets the priority as Triton's `InferenceRequest::SetPriority` does: 0 and values
    /// above the model's priority levels become the model's default level.
    fn set_priority(&mut self, priority: u64) {
        self.priority = kept_priority(priority, self.max_priority, self.default_priority);
    }

    /// Triton's `[request id: <id>] ` prefix of request errors.
    pub(crate) fn log_prefix(&self) -> String {
        let id = self.id.to_string_lossy();
        if id.is_empty() {
            "[request id: <id_unknown>] ".to_string()
        } else {
            format!("[request id: {id}] ")
        }
    }
}

/// Runs `body` on the request behind `request` (checked for null).
pub(crate) fn with_request(
    request: *mut TRITONSERVER_InferenceRequest,
    body: impl FnOnce(&mut TRITONSERVER_InferenceRequest) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live request from `TRITONSERVER_InferenceRequestNew`, or null.
        let request = unsafe { ffi::reference_mut(request, "inference_request") }?;
        body(request)
    })
}

/// Writes `value` through `out` (checked for null).
pub(crate) fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), ErrorPtr> {
    // SAFETY: an out-parameter from the caller, checked for null by `write`.
    unsafe { ffi::write(out, value, what) }
}

/// The text of a string argument.
pub(crate) fn text<'a>(value: *const c_char, what: &str) -> Result<&'a str, ErrorPtr> {
    // SAFETY: a NUL-terminated string from the caller, or null (checked).
    unsafe { ffi::text(value, what) }
}

/// The highest and the default priority a request for a model with `config` may have,
/// as Triton's model reads them: its dynamic batcher's levels, any priority for an
/// ensemble (its composing models apply their own), none otherwise.
fn priority_levels(config: &ModelConfig) -> (u64, u64) {
    match &config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(d)) => (d.priority_levels, d.default_priority_level),
        Some(SchedulingChoice::EnsembleScheduling(_)) => (u64::MAX, 0),
        _ => (0, 0),
    }
}

/// The priority a request keeps when `priority` is set for a model with `max` levels and
/// level `default` as its default (Triton's `InferenceRequest::SetPriority`).
fn kept_priority(priority: u64, max: u64, default: u64) -> u64 {
    if priority == 0 || priority > max {
        default
    } else {
        priority
    }
}

/// `TRITONSERVER_InferenceRequestNew`: a request for a model version (-1 = latest); the
/// model must be available, as in Triton.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestNew(
    inference_request: *mut *mut TRITONSERVER_InferenceRequest,
    server: *mut TRITONSERVER_Server,
    model_name: *const c_char,
    model_version: i64,
) -> ErrorPtr {
    ffi::status(|| {
        if inference_request.is_null() {
            return Err(invalid_arg("inference_request must not be null"));
        }
        // SAFETY: a live server, or null (checked).
        let live = unsafe { ffi::reference(server, "server") }?;
        let name = text(model_name, "model_name")?;
        let model_version = version(model_version);
        let spec = live
            .engine
            .server()
            .model_spec(name, model_version)
            .map_err(|e| from_core(&e))?;
        let (max_priority, default_priority) = priority_levels(&spec.config);
        let mut created = Box::new(TRITONSERVER_InferenceRequest {
            model_name: name.to_string(),
            model_version,
            id: CString::default(),
            flags: 0,
            correlation: Correlation::Number(0),
            priority: 0,
            max_priority,
            default_priority,
            timeout_us: 0,
            inputs: Vec::new(),
            requested_outputs: Vec::new(),
            parameters: Vec::new(),
            release: None,
            response: None,
            cancel: None,
        });
        // A new request has the model's default priority, as in Triton.
        created.set_priority(0);
        // SAFETY: checked for null above; the caller owns the new request.
        unsafe { inference_request.write(Box::into_raw(created)) };
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestDelete`: frees a request (null is ignored).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestDelete(
    inference_request: *mut TRITONSERVER_InferenceRequest,
) -> ErrorPtr {
    if !inference_request.is_null() {
        // SAFETY: created by `TRITONSERVER_InferenceRequestNew` and owned by the caller.
        drop(unsafe { Box::from_raw(inference_request) });
    }
    std::ptr::null_mut()
}

/// `TRITONSERVER_InferenceRequestId`: the id, valid until it changes or the request dies.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestId(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    id: *mut *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| put(id, r.id.as_ptr(), "id"))
}

/// `TRITONSERVER_InferenceRequestSetId`: the id echoed in the response.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetId(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    id: *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.id = c_string(text(id, "id")?);
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestFlags`: the `TRITONSERVER_RequestFlag` bits.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestFlags(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    flags: *mut u32,
) -> ErrorPtr {
    with_request(inference_request, |r| put(flags, r.flags, "flags"))
}

/// `TRITONSERVER_InferenceRequestSetFlags`: SEQUENCE_START=1, SEQUENCE_END=2.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetFlags(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    flags: u32,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.flags = flags;
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestCorrelationId`: the numeric correlation id (an error
/// when it is a string).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestCorrelationId(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    correlation_id: *mut u64,
) -> ErrorPtr {
    with_request(inference_request, |r| match &r.correlation {
        Correlation::Number(n) => put(correlation_id, *n, "correlation_id"),
        Correlation::Text(_) => Err(invalid_arg(
            "given request's correlation id is not an unsigned int",
        )),
    })
}

/// `TRITONSERVER_InferenceRequestCorrelationIdString`: the string correlation id (an
/// error when it is a number).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestCorrelationIdString(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    correlation_id: *mut *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| match &r.correlation {
        Correlation::Text(s) => put(correlation_id, s.as_ptr(), "correlation_id"),
        Correlation::Number(_) => Err(invalid_arg(
            "given request's correlation id is not a string",
        )),
    })
}

/// `TRITONSERVER_InferenceRequestSetCorrelationId`: a numeric correlation id.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetCorrelationId(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    correlation_id: u64,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.correlation = Correlation::Number(correlation_id);
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestSetCorrelationIdString`: a string correlation id of at
/// most 128 characters.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetCorrelationIdString(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    correlation_id: *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let id = text(correlation_id, "correlation_id")?;
        if id.len() > 128 {
            return Err(new_error(
                TRITONSERVER_Error_Code::Unsupported,
                "string correlation ID cannot be longer than 128 characters",
            ));
        }
        r.correlation = Correlation::Text(c_string(id));
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestPriority`: the priority, when it fits 32 bits.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestPriority(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    priority: *mut u32,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let narrow = u32::try_from(r.priority).map_err(|_| {
            invalid_arg(format!(
                "request priority overflows uint32_t, use TRITONSERVER_InferenceRequestPriorityUInt64, priority={}",
                r.priority
            ))
        })?;
        put(priority, narrow, "priority")
    })
}

/// `TRITONSERVER_InferenceRequestPriorityUInt64`: the priority (the model's default level
/// unless a valid one was set).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestPriorityUInt64(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    priority: *mut u64,
) -> ErrorPtr {
    with_request(inference_request, |r| put(priority, r.priority, "priority"))
}

/// `TRITONSERVER_InferenceRequestSetPriority`: sets the priority.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetPriority(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    priority: u32,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.set_priority(u64::from(priority));
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestSetPriorityUInt64`: sets the priority.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetPriorityUInt64(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    priority: u64,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.set_priority(priority);
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestTimeoutMicroseconds`: the timeout (0 = none).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestTimeoutMicroseconds(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    timeout_us: *mut u64,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        put(timeout_us, r.timeout_us, "timeout_us")
    })
}

/// `TRITONSERVER_InferenceRequestSetTimeoutMicroseconds`: sets the timeout.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    timeout_us: u64,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.timeout_us = timeout_us;
        Ok(())
    })
}

/// Appends a request parameter.
fn set_parameter(
    request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    value: impl FnOnce() -> Result<ParamValue, ErrorPtr>,
) -> ErrorPtr {
    with_request(request, |r| {
        let name = text(name, "name")?.to_string();
        r.parameters.push((name, value()?));
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestSetStringParameter`: a string parameter.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetStringParameter(
    request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    value: *const c_char,
) -> ErrorPtr {
    set_parameter(request, name, || {
        Ok(ParamValue::String(text(value, "value")?.to_string()))
    })
}

/// `TRITONSERVER_InferenceRequestSetIntParameter`: an integer parameter.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetIntParameter(
    request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    value: i64,
) -> ErrorPtr {
    set_parameter(request, name, || Ok(ParamValue::Int(value)))
}

/// `TRITONSERVER_InferenceRequestSetBoolParameter`: a boolean parameter.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetBoolParameter(
    request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    value: bool,
) -> ErrorPtr {
    set_parameter(request, name, || Ok(ParamValue::Bool(value)))
}

/// `TRITONSERVER_InferenceRequestSetDoubleParameter`: a double parameter.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetDoubleParameter(
    request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    value: f64,
) -> ErrorPtr {
    set_parameter(request, name, || Ok(ParamValue::Double(value)))
}

/// `TRITONSERVER_InferenceRequestSetReleaseCallback`: called with RELEASE_ALL once the
/// server is done with the request, which the caller may then reuse or delete.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetReleaseCallback(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    request_release_fn: Option<ReleaseFn>,
    request_release_userp: *mut c_void,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.release = request_release_fn.map(|f| (f, request_release_userp));
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestSetResponseCallback`: the allocator for outputs and the
/// function that receives the response.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestSetResponseCallback(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    response_allocator: *mut TRITONSERVER_ResponseAllocator,
    response_allocator_userp: *mut c_void,
    response_fn: Option<ResponseFn>,
    response_userp: *mut c_void,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let complete = response_fn.ok_or_else(|| invalid_arg("response_fn must not be null"))?;
        r.response = Some(ResponseTarget {
            allocator: response_allocator,
            allocator_userp: response_allocator_userp,
            complete,
            userp: response_userp,
        });
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestCancel`: cancels the submitted request; one not yet
/// answered is answered with a CANCELLED error (an error before the first submission, as
/// in Triton).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestCancel(
    inference_request: *mut TRITONSERVER_InferenceRequest,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let cancel = r
            .cancel
            .as_ref()
            .ok_or_else(|| not_submitted("cancel an inference request"))?;
        cancel.cancel();
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestIsCancelled`: whether the latest submission was
/// cancelled (an error before the first submission, as in Triton).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestIsCancelled(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    is_cancelled: *mut bool,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let cancel = r
            .cancel
            .as_ref()
            .ok_or_else(|| not_submitted("query cancellation status"))?;
        put(is_cancelled, cancel.is_cancelled(), "is_cancelled")
    })
}

#[cfg(test)]
mod tests {
    use nereid_proto::inference::{ModelDynamicBatching, ModelEnsembling};

    use super::*;

    #[test]
    fn priorities_outside_the_models_levels_become_its_default() {
        let mut config = ModelConfig {
            scheduling_choice: Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching {
                priority_levels: 20,
                default_priority_level: 10,
                ..Default::default()
            })),
            ..Default::default()
        };
        let (max, default) = priority_levels(&config);
        assert_eq!((max, default), (20, 10));
        // Triton's L0_python_api test_request: 19 is kept, 67 and 0 fall back to 10.
        assert_eq!(kept_priority(19, max, default), 19);
        assert_eq!(kept_priority(67, max, default), 10);
        assert_eq!(kept_priority(0, max, default), 10);

        // Without levels every priority is 0; an ensemble passes any on.
        config.scheduling_choice = None;
        let (max, default) = priority_levels(&config);
        assert_eq!(kept_priority(5, max, default), 0);
        config.scheduling_choice = Some(SchedulingChoice::EnsembleScheduling(
            ModelEnsembling::default(),
        ));
        let (max, default) = priority_levels(&config);
        assert_eq!(kept_priority(u64::MAX, max, default), u64::MAX);
    }
}
