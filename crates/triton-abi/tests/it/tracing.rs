//! In-process tracing through the exported functions: a trace handed to
//! `TRITONSERVER_ServerInferAsync` reports Triton's activities on its callbacks and comes
//! back through its release callback; a submission that fails leaves it with the caller.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::null_mut;
use std::sync::mpsc;
use std::time::Duration;

use tritonserver::inprocess::allocator::*;
use tritonserver::inprocess::infer::TRITONSERVER_ServerInferAsync;
use tritonserver::inprocess::request::*;
use tritonserver::inprocess::response::*;
use tritonserver::inprocess::server::*;
use tritonserver::inprocess::tensors::*;
use tritonserver::inprocess::trace::*;

use crate::direct::{failure, ok, on_release, on_response, start, Event};
use crate::fixture;

/// What the trace callbacks saw: (trace id, parent id, model, version, request id,
/// activity, tensor name or empty), then `None` for each release.
type Seen = mpsc::Sender<Option<(u64, u64, String, i64, String, u32, String)>>;

/// The trace's identity as a callback reads it.
unsafe fn identity(trace: *mut TRITONSERVER_InferenceTrace) -> (u64, u64, String, i64, String) {
    let (mut id, mut parent, mut version) = (0, 0, 0);
    let (mut model, mut request): (*const c_char, *const c_char) =
        (std::ptr::null(), std::ptr::null());
    // SAFETY: a live trace inside its callback; valid out-parameters.
    unsafe {
        ok(TRITONSERVER_InferenceTraceId(trace, &mut id));
        ok(TRITONSERVER_InferenceTraceParentId(trace, &mut parent));
        ok(TRITONSERVER_InferenceTraceModelName(trace, &mut model));
        ok(TRITONSERVER_InferenceTraceModelVersion(trace, &mut version));
        ok(TRITONSERVER_InferenceTraceRequestId(trace, &mut request));
        let text = |p| CStr::from_ptr(p).to_string_lossy().into_owned();
        (id, parent, text(model), version, text(request))
    }
}

unsafe extern "C" fn on_activity(
    trace: *mut TRITONSERVER_InferenceTrace,
    activity: u32,
    _ns: u64,
    userp: *mut c_void,
) {
    // SAFETY: the test's channel and a live trace.
    let (seen, (id, parent, model, version, request)) =
        unsafe { (&*userp.cast::<Seen>(), identity(trace)) };
    let _ = seen.send(Some((
        id,
        parent,
        model,
        version,
        request,
        activity,
        String::new(),
    )));
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn on_tensor(
    trace: *mut TRITONSERVER_InferenceTrace,
    activity: u32,
    name: *const c_char,
    datatype: u32,
    _base: *const c_void,
    byte_size: usize,
    _shape: *const i64,
    dims: u64,
    _memory_type: u32,
    _memory_type_id: i64,
    userp: *mut c_void,
) {
    assert_eq!((datatype, byte_size, dims), (11, 16, 2), "FP32 [1, 4]");
    // SAFETY: the test's channel, a live trace and the tensor's name.
    let (seen, (id, parent, model, version, request), name) = unsafe {
        let name = CStr::from_ptr(name).to_string_lossy().into_owned();
        (&*userp.cast::<Seen>(), identity(trace), name)
    };
    let _ = seen.send(Some((id, parent, model, version, request, activity, name)));
}

unsafe extern "C" fn on_trace_release(trace: *mut TRITONSERVER_InferenceTrace, userp: *mut c_void) {
    // SAFETY: the test's channel; the trace is ours now, deleted here.
    unsafe {
        let _ = (*userp.cast::<Seen>()).send(None);
        ok(TRITONSERVER_InferenceTraceDelete(trace));
    }
}

/// A request for add_sub with both inputs, answered through `events`.
unsafe fn add_sub_request(
    server: *mut TRITONSERVER_Server,
    allocator: *mut TRITONSERVER_ResponseAllocator,
    memory: &std::cell::Cell<fixture::Memory>,
    values: &[f32; 4],
    events: *mut mpsc::Sender<Event>,
) -> *mut TRITONSERVER_InferenceRequest {
    let mut request = null_mut();
    let shape = [1i64, 4];
    // SAFETY: valid pointers; `values` outlives the submission.
    unsafe {
        ok(TRITONSERVER_InferenceRequestNew(
            &mut request,
            server,
            c"add_sub".as_ptr(),
            -1,
        ));
        ok(TRITONSERVER_InferenceRequestSetId(
            request,
            c"traced".as_ptr(),
        ));
        for name in [c"INPUT0", c"INPUT1"] {
            ok(TRITONSERVER_InferenceRequestAddInput(
                request,
                name.as_ptr(),
                11,
                shape.as_ptr(),
                2,
            ));
            ok(TRITONSERVER_InferenceRequestAppendInputData(
                request,
                name.as_ptr(),
                values.as_ptr().cast(),
                16,
                0,
                0,
            ));
        }
        ok(TRITONSERVER_InferenceRequestSetReleaseCallback(
            request,
            Some(on_release),
            events.cast(),
        ));
        ok(TRITONSERVER_InferenceRequestSetResponseCallback(
            request,
            allocator,
            memory.as_ptr().cast(),
            Some(on_response),
            events.cast(),
        ));
    }
    request
}

#[test]
fn a_traced_request_reports_tritons_activities_then_gives_the_trace_back() {
    if !fixture::onnx_runtime_available() {
        return;
    }
    let repository = fixture::repository();
    let server = start(repository.path());
    let (sender, events) = mpsc::channel::<Event>();
    let sender = Box::into_raw(Box::new(sender));
    let (seen_sender, seen) = mpsc::channel();
    let seen_sender: *mut Seen = Box::into_raw(Box::new(seen_sender));
    let memory = std::cell::Cell::new(fixture::Memory::Host);
    let values = [1.0f32, 2.0, 3.0, 4.0];
    let mut allocator = null_mut();
    let timeout = Duration::from_secs(30);
    // SAFETY: valid pointers throughout; the channels outlive every callback.
    unsafe {
        ok(TRITONSERVER_ResponseAllocatorNew(
            &mut allocator,
            Some(fixture::alloc),
            Some(fixture::release),
            None,
        ));
        let request = add_sub_request(server, allocator, &memory, &values, sender);
        let mut trace = null_mut();
        ok(TRITONSERVER_InferenceTraceTensorNew(
            &mut trace,
            0x4 | 0x8,
            123,
            Some(on_activity),
            Some(on_tensor),
            Some(on_trace_release),
            seen_sender.cast(),
        ));
        let mut id = 0;
        ok(TRITONSERVER_InferenceTraceId(trace, &mut id));
        assert!(id > 0);
        ok(TRITONSERVER_ServerInferAsync(server, request, trace));
        let Ok(Event::Response(response)) = events.recv_timeout(timeout) else {
            panic!("expected the response first");
        };
        assert!(matches!(events.recv_timeout(timeout), Ok(Event::Released)));
        ok(TRITONSERVER_InferenceResponseDelete(response as *mut _));

        let mut timeline = Vec::new();
        let mut tensors = Vec::new();
        while let Some((trace_id, parent, model, version, request_id, activity, tensor)) =
            seen.recv_timeout(timeout).expect("the trace is released")
        {
            assert_eq!(
                (
                    trace_id,
                    parent,
                    model.as_str(),
                    version,
                    request_id.as_str()
                ),
                (id, 123, "add_sub", 1, "traced")
            );
            match tensor.is_empty() {
                true => timeline.push(activity),
                false => tensors.push((activity, tensor)),
            }
        }
        // REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END,
        // COMPUTE_OUTPUT_START, COMPUTE_END, REQUEST_END, in order.
        assert_eq!(timeline, [0, 1, 2, 3, 4, 5, 6]);
        tensors.sort();
        let expected = [(7, "INPUT0"), (7, "INPUT1"), (9, "OUTPUT0"), (9, "OUTPUT1")];
        assert_eq!(tensors, expected.map(|(a, n)| (a, n.to_string())));

        // A submission refused before it runs leaves the trace with the caller: no
        // activity, no release, and the caller deletes it.
        let request = add_sub_request(server, allocator, &memory, &values, sender);
        ok(TRITONSERVER_InferenceRequestRemoveAllInputs(request));
        let mut refused = null_mut();
        ok(TRITONSERVER_InferenceTraceNew(
            &mut refused,
            0x4,
            0,
            Some(on_activity),
            Some(on_trace_release),
            seen_sender.cast(),
        ));
        failure(TRITONSERVER_ServerInferAsync(server, request, refused));
        assert!(seen.recv_timeout(Duration::from_millis(200)).is_err());
        ok(TRITONSERVER_InferenceTraceDelete(refused));
        ok(TRITONSERVER_InferenceRequestDelete(request));

        ok(TRITONSERVER_ResponseAllocatorDelete(allocator));
        ok(TRITONSERVER_ServerDelete(server));
        drop(Box::from_raw(sender));
        drop(Box::from_raw(seen_sender));
    }
}
