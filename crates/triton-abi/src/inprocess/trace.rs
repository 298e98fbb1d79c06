//! In-process inference tracing (`TRITONSERVER_InferenceTrace*`): the caller creates a
//! trace with its callbacks and hands it to `TRITONSERVER_ServerInferAsync`, which takes
//! it over. The core then reports the request's activities to it as they happen
//! (`REQUEST_START`, `QUEUE_START`, `COMPUTE_*`, `REQUEST_END`, and at the `TENSORS`
//! level the queued inputs and the backend's outputs, as Triton's core reports them); an
//! ensemble's steps are reported on child traces it creates. Once the request and its
//! steps are done, each child and then the trace itself go back to the caller through
//! the release callback, which takes ownership (`TRITONSERVER_InferenceTraceDelete`).
//! Timestamps are the monotonic clock's nanoseconds, as Triton's steady clock.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use nereid_core::trace::{
    next_trace_id, RequestTrace, TensorActivity, TraceLevel, TraceListener, TracedTensor,
};
use parking_lot::Mutex;

use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi::{self, put};
use crate::types::{datatype_to_raw, memory_type};

/// `TRITONSERVER_InferenceTraceActivityFn_t`.
pub type ActivityFn = unsafe extern "C" fn(*mut TRITONSERVER_InferenceTrace, u32, u64, *mut c_void);

/// `TRITONSERVER_InferenceTraceTensorActivityFn_t`.
pub type TensorActivityFn = unsafe extern "C" fn(
    *mut TRITONSERVER_InferenceTrace,
    u32,
    *const c_char,
    u32,
    *const c_void,
    usize,
    *const i64,
    u64,
    u32,
    i64,
    *mut c_void,
);

/// `TRITONSERVER_InferenceTraceReleaseFn_t`.
pub type ReleaseFn = unsafe extern "C" fn(*mut TRITONSERVER_InferenceTrace, *mut c_void);

/// `TRITONSERVER_TRACE_LEVEL_MIN` and `_MAX` (deprecated), read as `TIMESTAMPS`.
const LEVEL_MIN_MAX: u32 = 0x1 | 0x2;
/// `TRITONSERVER_TRACE_LEVEL_TIMESTAMPS`.
const LEVEL_TIMESTAMPS: u32 = 0x4;
/// `TRITONSERVER_TRACE_LEVEL_TENSORS`.
const LEVEL_TENSORS: u32 = 0x8;

/// How many of [`ACTIVITIES`] are the timeline's (`REQUEST_START` ... `REQUEST_END`).
const TIMELINE: usize = 7;
/// `TRITONSERVER_TRACE_TENSOR_QUEUE_INPUT`.
const TENSOR_QUEUE_INPUT: u32 = 7;
/// `TRITONSERVER_TRACE_TENSOR_BACKEND_INPUT`.
const TENSOR_BACKEND_INPUT: u32 = 8;
/// `TRITONSERVER_TRACE_TENSOR_BACKEND_OUTPUT`.
const TENSOR_BACKEND_OUTPUT: u32 = 9;
/// `TRITONSERVER_TRACE_CUSTOM_ACTIVITY`.
const CUSTOM_ACTIVITY: u32 = 10;

/// The caller's functions and pointer, shared by a trace and its children.
struct Callbacks {
    activity: Option<ActivityFn>,
    tensor: Option<TensorActivityFn>,
    release: Option<ReleaseFn>,
    userp: *mut c_void,
}

// SAFETY: the caller's functions and user pointer; Triton calls them from its own
// threads, so a caller of this API must accept any thread.
unsafe impl Send for Callbacks {}
// SAFETY: as for Send.
unsafe impl Sync for Callbacks {}

/// The request a trace follows, known once the core takes it.
struct Identity {
    model: CString,
    version: i64,
    request_id: CString,
}

/// The object behind `TRITONSERVER_InferenceTrace*`.
pub struct TRITONSERVER_InferenceTrace {
    id: u64,
    parent_id: u64,
    /// The level asked for (`TRITONSERVER_InferenceTraceLevel` bits).
    level: u32,
    callbacks: Arc<Callbacks>,
    identity: OnceLock<Identity>,
    /// `TRITONSERVER_InferenceTraceSetContext`'s value.
    context: Mutex<CString>,
}

impl TRITONSERVER_InferenceTrace {
    /// A trace `id` under `parent_id` with `callbacks`.
    fn new(level: u32, id: u64, parent_id: u64, callbacks: Arc<Callbacks>) -> Self {
        Self {
            id,
            parent_id,
            level,
            callbacks,
            identity: OnceLock::new(),
            context: Mutex::new(CString::default()),
        }
    }

    /// What the core traces for it: timestamps unless the level is off, tensors when
    /// asked for and a tensor callback was given.
    fn core_level(&self) -> TraceLevel {
        TraceLevel {
            timestamps: self.level & (LEVEL_MIN_MAX | LEVEL_TIMESTAMPS) != 0,
            tensors: self.level & LEVEL_TENSORS != 0 && self.callbacks.tensor.is_some(),
        }
    }

    /// Reports timeline activity `activity` at `ns` to the caller.
    fn report(&self, activity: u32, ns: u64) {
        if let Some(report) = self.callbacks.activity {
            let this = self as *const Self as *mut Self;
            // SAFETY: the caller's activity function with a live trace (it must not take
            // ownership of it) and its own user pointer.
            unsafe { report(this, activity, ns, self.callbacks.userp) };
        }
    }
}

/// The core's listener for a trace handed to `TRITONSERVER_ServerInferAsync`: it
/// reports to that trace and to the child traces it makes for an ensemble's steps, and
/// gives them all back through the release callback once the request is done and the
/// submission has succeeded (before that, the caller still owns the trace).
pub(crate) struct Forwarder {
    root: *mut TRITONSERVER_InferenceTrace,
    children: Mutex<Vec<*mut TRITONSERVER_InferenceTrace>>,
    /// (submission succeeded, every activity reported): the second one releases.
    release: Mutex<(bool, bool)>,
}

// SAFETY: the traces are owned by the forwarder from submission to release; the caller
// only reads them inside its callbacks, which take no ownership.
unsafe impl Send for Forwarder {}
// SAFETY: the child list and release state are behind locks; the traces themselves are
// read-only but for their identity, set once through a `OnceLock`.
unsafe impl Sync for Forwarder {}

impl Forwarder {
    /// The core trace of a request traced by `root` (a live trace the caller hands over
    /// if the submission succeeds), and the forwarder to [`Self::arm`] then.
    ///
    /// # Safety
    /// `root` must be a live trace from this module that stays valid until released.
    pub(crate) unsafe fn start(
        root: *mut TRITONSERVER_InferenceTrace,
    ) -> (Arc<Self>, RequestTrace) {
        // SAFETY: live by the caller's contract.
        let trace = unsafe { &*root };
        let forwarder = Arc::new(Self {
            root,
            children: Mutex::new(Vec::new()),
            release: Mutex::new((false, false)),
        });
        let core = RequestTrace::listened(
            forwarder.clone(),
            trace.core_level(),
            trace.id,
            trace.parent_id,
        );
        (forwarder, core)
    }

    /// The submission succeeded: the traces are the server's, to release when done.
    pub(crate) fn arm(&self) {
        let finished = {
            let mut state = self.release.lock();
            state.0 = true;
            state.1
        };
        if finished {
            self.release_all();
        }
    }

    fn root(&self) -> &TRITONSERVER_InferenceTrace {
        // SAFETY: owned by this forwarder (or still by the caller, who may not delete it
        // while the submission is under way) until released.
        unsafe { &*self.root }
    }

    /// The trace with `id`: the root, a child made earlier, or a new child of
    /// `parent_id`.
    fn trace(&self, id: u64, parent_id: u64) -> &TRITONSERVER_InferenceTrace {
        let root = self.root();
        if id == root.id {
            return root;
        }
        let mut children = self.children.lock();
        // SAFETY: children are boxes this forwarder made and releases only at the end.
        if let Some(child) = children.iter().find(|c| unsafe { (***c).id } == id) {
            // SAFETY: as above.
            return unsafe { &**child };
        }
        let parent = if parent_id == 0 { root.id } else { parent_id };
        let child = Box::into_raw(Box::new(TRITONSERVER_InferenceTrace::new(
            root.level,
            id,
            parent,
            root.callbacks.clone(),
        )));
        children.push(child);
        // SAFETY: just made, released only at the end.
        unsafe { &*child }
    }

    /// Gives every child, then the root, to the release callback (or deletes them when
    /// there is none).
    fn release_all(&self) {
        let children = std::mem::take(&mut *self.children.lock());
        for trace in children.into_iter().chain(std::iter::once(self.root)) {
            // SAFETY: owned by this forwarder; read before handing it over.
            let callbacks = unsafe { (*trace).callbacks.clone() };
            match callbacks.release {
                // SAFETY: ownership goes to the caller's release function.
                Some(release) => unsafe { release(trace, callbacks.userp) },
                // SAFETY: a box from `Box::into_raw`, no longer referenced.
                None => drop(unsafe { Box::from_raw(trace) }),
            }
        }
    }
}

impl TraceListener for Forwarder {
    fn identify(&self, id: u64, parent_id: u64, model: &str, version: i64, request_id: &str) {
        let trace = self.trace(id, parent_id);
        let text = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
        let _ = trace.identity.set(Identity {
            model: text(model),
            version,
            request_id: text(request_id),
        });
    }

    fn timestamp(&self, id: u64, name: &str, at: Instant) {
        let timeline = &ACTIVITIES[..TIMELINE];
        if let Some(activity) = timeline
            .iter()
            .position(|n| n.to_bytes() == name.as_bytes())
        {
            self.trace(id, 0).report(activity as u32, monotonic_ns(at));
        }
    }

    fn tensor(&self, id: u64, activity: TensorActivity, tensor: TracedTensor<'_>) {
        let trace = self.trace(id, 0);
        let Some(report) = trace.callbacks.tensor else {
            return;
        };
        let activity = match activity {
            TensorActivity::QueueInput => TENSOR_QUEUE_INPUT,
            TensorActivity::BackendInput => TENSOR_BACKEND_INPUT,
            TensorActivity::BackendOutput => TENSOR_BACKEND_OUTPUT,
        };
        let Ok(name) = CString::new(tensor.name) else {
            return;
        };
        let this = trace as *const TRITONSERVER_InferenceTrace as *mut TRITONSERVER_InferenceTrace;
        // SAFETY: the caller's tensor function with a live trace, the tensor's name,
        // bytes and shape (valid for the call) and its own user pointer.
        unsafe {
            report(
                this,
                activity,
                name.as_ptr(),
                datatype_to_raw(tensor.datatype),
                tensor.data.as_ptr().cast(),
                tensor.data.len(),
                tensor.shape.as_ptr(),
                tensor.shape.len() as u64,
                memory_type::CPU,
                0,
                trace.callbacks.userp,
            )
        };
    }

    fn finished(&self) {
        let armed = {
            let mut state = self.release.lock();
            state.1 = true;
            state.0
        };
        if armed {
            self.release_all();
        }
    }
}

/// `at` on the monotonic clock (`CLOCK_MONOTONIC`), in nanoseconds, as Triton's steady
/// clock reports activities.
fn monotonic_ns(at: Instant) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write the clock into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let now_ns = (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64);
    let ago = Instant::now().saturating_duration_since(at).as_nanos();
    now_ns.saturating_sub(u64::try_from(ago).unwrap_or(u64::MAX))
}

/// `TRITONSERVER_InferenceTraceNew`: a trace reporting timeline activities.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceNew(
    trace: *mut *mut TRITONSERVER_InferenceTrace,
    level: u32,
    parent_id: u64,
    activity_fn: Option<ActivityFn>,
    release_fn: Option<ReleaseFn>,
    trace_userp: *mut c_void,
) -> ErrorPtr {
    // SAFETY: the same contract, without a tensor function.
    unsafe {
        TRITONSERVER_InferenceTraceTensorNew(
            trace,
            level,
            parent_id,
            activity_fn,
            None,
            release_fn,
            trace_userp,
        )
    }
}

/// `TRITONSERVER_InferenceTraceTensorNew`: a trace reporting timeline and tensor
/// activities; its id is new and unique in the process.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceTensorNew(
    trace: *mut *mut TRITONSERVER_InferenceTrace,
    level: u32,
    parent_id: u64,
    activity_fn: Option<ActivityFn>,
    tensor_activity_fn: Option<TensorActivityFn>,
    release_fn: Option<ReleaseFn>,
    trace_userp: *mut c_void,
) -> ErrorPtr {
    ffi::status(|| {
        if trace.is_null() {
            return Err(invalid_arg("trace must not be null"));
        }
        let callbacks = Arc::new(Callbacks {
            activity: activity_fn,
            tensor: tensor_activity_fn,
            release: release_fn,
            userp: trace_userp,
        });
        let made = TRITONSERVER_InferenceTrace::new(level, next_trace_id(), parent_id, callbacks);
        put(trace, Box::into_raw(Box::new(made)), "trace")
    })
}

/// `TRITONSERVER_InferenceTraceReportActivity`: reports `CUSTOM_ACTIVITY` at the
/// caller's timestamp (Triton's callbacks carry no activity name).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceReportActivity(
    trace: *mut TRITONSERVER_InferenceTrace,
    timestamp: u64,
    activity_name: *const c_char,
) -> ErrorPtr {
    with_trace(trace, |t| {
        // SAFETY: a C string or null (checked).
        unsafe { ffi::text(activity_name, "activity_name") }?;
        if t.core_level().timestamps {
            t.report(CUSTOM_ACTIVITY, timestamp);
        }
        Ok(())
    })
}

/// `TRITONSERVER_InferenceTraceDelete`: frees a trace the caller owns.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceDelete(
    trace: *mut TRITONSERVER_InferenceTrace,
) -> ErrorPtr {
    ffi::status(|| {
        if trace.is_null() {
            return Err(invalid_arg("trace must not be null"));
        }
        // SAFETY: a box from this module the caller owns and no longer uses.
        drop(unsafe { Box::from_raw(trace) });
        Ok(())
    })
}

/// Runs `body` on the trace behind `trace` (checked for null).
fn with_trace(
    trace: *mut TRITONSERVER_InferenceTrace,
    body: impl FnOnce(&TRITONSERVER_InferenceTrace) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: a live trace from this module, or null (checked).
    unsafe { ffi::with(trace, "trace", body) }
}

/// `TRITONSERVER_InferenceTraceId`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceId(
    trace: *mut TRITONSERVER_InferenceTrace,
    id: *mut u64,
) -> ErrorPtr {
    with_trace(trace, |t| put(id, t.id, "id"))
}

/// `TRITONSERVER_InferenceTraceParentId`.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceParentId(
    trace: *mut TRITONSERVER_InferenceTrace,
    parent_id: *mut u64,
) -> ErrorPtr {
    with_trace(trace, |t| put(parent_id, t.parent_id, "parent_id"))
}

/// `TRITONSERVER_InferenceTraceModelName`: empty until the core has taken the request.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceModelName(
    trace: *mut TRITONSERVER_InferenceTrace,
    model_name: *mut *const c_char,
) -> ErrorPtr {
    with_trace(trace, |t| {
        let name = t.identity.get().map_or(c"".as_ptr(), |i| i.model.as_ptr());
        put(model_name, name, "model_name")
    })
}

/// `TRITONSERVER_InferenceTraceModelVersion`: -1 until the core has taken the request.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceModelVersion(
    trace: *mut TRITONSERVER_InferenceTrace,
    model_version: *mut i64,
) -> ErrorPtr {
    with_trace(trace, |t| {
        let version = t.identity.get().map_or(-1, |i| i.version);
        put(model_version, version, "model_version")
    })
}

/// `TRITONSERVER_InferenceTraceRequestId`: empty until the core has taken the request.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceRequestId(
    trace: *mut TRITONSERVER_InferenceTrace,
    request_id: *mut *const c_char,
) -> ErrorPtr {
    with_trace(trace, |t| {
        let id = t
            .identity
            .get()
            .map_or(c"".as_ptr(), |i| i.request_id.as_ptr());
        put(request_id, id, "request_id")
    })
}

/// `TRITONSERVER_InferenceTraceSpawnChildTrace`: a new trace under this one, with its
/// callbacks; the caller owns it.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceSpawnChildTrace(
    trace: *mut TRITONSERVER_InferenceTrace,
    child_trace: *mut *mut TRITONSERVER_InferenceTrace,
) -> ErrorPtr {
    with_trace(trace, |t| {
        let child =
            TRITONSERVER_InferenceTrace::new(t.level, next_trace_id(), t.id, t.callbacks.clone());
        put(child_trace, Box::into_raw(Box::new(child)), "child_trace")
    })
}

/// `TRITONSERVER_InferenceTraceSetContext`: keeps the caller's context text.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceSetContext(
    trace: *mut TRITONSERVER_InferenceTrace,
    trace_context: *const c_char,
) -> ErrorPtr {
    with_trace(trace, |t| {
        // SAFETY: a C string or null (checked).
        let text = unsafe { ffi::text(trace_context, "trace_context") }?;
        *t.context.lock() = CString::new(text).unwrap_or_default();
        Ok(())
    })
}

/// `TRITONSERVER_InferenceTraceContext`: the context set last (valid until the next
/// set or the trace's deletion).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceTraceContext(
    trace: *mut TRITONSERVER_InferenceTrace,
    trace_context: *mut *const c_char,
) -> ErrorPtr {
    with_trace(trace, |t| {
        put(trace_context, t.context.lock().as_ptr(), "trace_context")
    })
}

/// `TRITONSERVER_InferenceTraceLevelString`: the level's name.
#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceTraceLevelString(level: u32) -> *const c_char {
    match level {
        0 => c"DISABLED".as_ptr(),
        1 => c"MIN".as_ptr(),
        2 => c"MAX".as_ptr(),
        4 => c"TIMESTAMPS".as_ptr(),
        8 => c"TENSORS".as_ptr(),
        _ => c"<unknown>".as_ptr(),
    }
}

/// Names of `TRITONSERVER_InferenceTraceActivity` values, in order.
const ACTIVITIES: [&std::ffi::CStr; 11] = [
    c"REQUEST_START",
    c"QUEUE_START",
    c"COMPUTE_START",
    c"COMPUTE_INPUT_END",
    c"COMPUTE_OUTPUT_START",
    c"COMPUTE_END",
    c"REQUEST_END",
    c"TENSOR_QUEUE_INPUT",
    c"TENSOR_BACKEND_INPUT",
    c"TENSOR_BACKEND_OUTPUT",
    c"CUSTOM_ACTIVITY",
];

/// `TRITONSERVER_InferenceTraceActivityString`: the activity's name.
#[no_mangle]
pub extern "C" fn TRITONSERVER_InferenceTraceActivityString(activity: u32) -> *const c_char {
    ACTIVITIES
        .get(activity as usize)
        .map_or(c"<unknown>".as_ptr(), |name| name.as_ptr())
}
