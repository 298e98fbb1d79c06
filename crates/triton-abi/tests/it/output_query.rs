//! `TRITONBACKEND_RequestOutputBufferProperties` through the in-process API: the C test
//! backend's `query` mode asks where its output will go, and the request's allocator
//! query function answers (Triton forwards the call the same way); a request whose
//! allocator has none gets Triton's UNAVAILABLE "Output properties are not available".

use std::ffi::{c_char, c_void, CStr};
use std::path::Path;
use std::ptr::{null, null_mut};
use std::sync::mpsc;
use std::time::Duration;

use tritonserver::error::{ErrorPtr, TRITONSERVER_Error_Code};
use tritonserver::inprocess::allocator::*;
use tritonserver::inprocess::infer::TRITONSERVER_ServerInferAsync;
use tritonserver::inprocess::options::*;
use tritonserver::inprocess::request::*;
use tritonserver::inprocess::response::*;
use tritonserver::inprocess::server::*;
use tritonserver::inprocess::start::TRITONSERVER_ServerNew;
use tritonserver::inprocess::tensors::*;

use crate::decoupled::build_backend;
use crate::direct::{failure, ok};
use crate::fixture;

/// What the query function was asked: the name, the byte size, the backend's preference.
type Asked = (Option<String>, Option<usize>, u32, i64);

/// The allocator's query function: records what it was asked (the allocator's user
/// pointer is the test's channel) and answers GPU memory on device 3.
unsafe extern "C" fn query(
    _allocator: *mut TRITONSERVER_ResponseAllocator,
    userp: *mut c_void,
    name: *const c_char,
    byte_size: *mut usize,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> ErrorPtr {
    // SAFETY: the test's channel, a name or null, valid in/out parameters.
    unsafe {
        let asked = userp
            .cast::<mpsc::Sender<Asked>>()
            .as_ref()
            .expect("channel");
        let name = (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned());
        let _ = asked.send((
            name,
            byte_size.as_ref().copied(),
            *memory_type,
            *memory_type_id,
        ));
        memory_type.write(2);
        memory_type_id.write(3);
    }
    null_mut()
}

/// The fixture's host allocation, whatever the allocator's user pointer (here the query's
/// channel).
#[allow(clippy::too_many_arguments)] // the C signature
unsafe extern "C" fn alloc(
    allocator: *mut TRITONSERVER_ResponseAllocator,
    name: *const c_char,
    size: usize,
    memory_type: u32,
    memory_type_id: i64,
    _userp: *mut c_void,
    buffer: *mut *mut c_void,
    buffer_userp: *mut *mut c_void,
    actual_memory_type: *mut u32,
    actual_memory_type_id: *mut i64,
) -> ErrorPtr {
    // SAFETY: the server's valid out-parameters; a null user pointer means host memory.
    unsafe {
        fixture::alloc(
            allocator,
            name,
            size,
            memory_type,
            memory_type_id,
            null_mut(),
            buffer,
            buffer_userp,
            actual_memory_type,
            actual_memory_type_id,
        )
    }
}

unsafe extern "C" fn on_response(
    response: *mut TRITONSERVER_InferenceResponse,
    _flags: u32,
    userp: *mut c_void,
) {
    // SAFETY: the test's channel.
    let responses = unsafe { &*userp.cast::<mpsc::Sender<usize>>() };
    let _ = responses.send(response as usize);
}

/// A repository with the model `querying` on the test backend.
fn repository(dir: &Path) {
    let model = dir.join("querying");
    std::fs::create_dir_all(model.join("1")).expect("model directory");
    std::fs::write(
        model.join("config.pbtxt"),
        r#"name: "querying"
backend: "nereid_test"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 3 ] } ]
parameters { key: "mode" value { string_value: "query" } }
"#,
    )
    .expect("config");
}

/// Runs one request on `querying` with `allocator` (its user pointer `asked`) and returns
/// the response.
fn infer(
    server: *mut TRITONSERVER_Server,
    allocator: *mut TRITONSERVER_ResponseAllocator,
    asked: *mut c_void,
) -> *mut TRITONSERVER_InferenceResponse {
    let (sender, responses) = mpsc::channel::<usize>();
    let sender = Box::into_raw(Box::new(sender));
    let mut request = null_mut();
    let value = [7i32];
    // SAFETY: valid pointers throughout; `value` and the channel outlive the request.
    unsafe {
        ok(TRITONSERVER_InferenceRequestNew(
            &mut request,
            server,
            c"querying".as_ptr(),
            -1,
        ));
        ok(TRITONSERVER_InferenceRequestAddInput(
            request,
            c"IN".as_ptr(),
            8,
            [1i64].as_ptr(),
            1,
        ));
        ok(TRITONSERVER_InferenceRequestAppendInputData(
            request,
            c"IN".as_ptr(),
            value.as_ptr().cast(),
            4,
            0,
            0,
        ));
        ok(TRITONSERVER_InferenceRequestSetResponseCallback(
            request,
            allocator,
            asked,
            Some(on_response),
            sender.cast(),
        ));
        ok(TRITONSERVER_ServerInferAsync(server, request, null_mut()));
    }
    let response = responses
        .recv_timeout(Duration::from_secs(30))
        .expect("a response") as *mut TRITONSERVER_InferenceResponse;
    // SAFETY: the request is released once its response came; the channel is ours.
    unsafe {
        drop(Box::from_raw(sender));
        ok(TRITONSERVER_InferenceRequestDelete(request));
    }
    response
}

#[test]
fn a_backend_asking_where_an_output_goes_is_answered_by_the_allocators_query() {
    let dir = tempfile::tempdir().expect("temporary directory");
    if !build_backend(&dir.path().join("backends")) {
        return;
    }
    repository(&dir.path().join("models"));
    let models = std::ffi::CString::new(dir.path().join("models").to_string_lossy().as_ref())
        .expect("no NUL");
    let backends = std::ffi::CString::new(dir.path().join("backends").to_string_lossy().as_ref())
        .expect("no NUL");
    let (mut options, mut server, mut allocator) = (null_mut(), null_mut(), null_mut());
    // SAFETY: valid pointers throughout.
    unsafe {
        ok(TRITONSERVER_ServerOptionsNew(&mut options));
        ok(TRITONSERVER_ServerOptionsSetModelRepositoryPath(
            options,
            models.as_ptr(),
        ));
        ok(TRITONSERVER_ServerOptionsSetBackendDirectory(
            options,
            backends.as_ptr(),
        ));
        ok(TRITONSERVER_ServerNew(&mut server, options));
        ok(TRITONSERVER_ServerOptionsDelete(options));
        ok(TRITONSERVER_ResponseAllocatorNew(
            &mut allocator,
            Some(alloc),
            Some(fixture::release),
            None,
        ));
    }

    // No query function: Triton's UNAVAILABLE, as the response's error.
    let response = infer(server, allocator, null_mut());
    // SAFETY: a live response, deleted after reading.
    let (code, message) = failure(unsafe { TRITONSERVER_InferenceResponseError(response) });
    assert_eq!(code, TRITONSERVER_Error_Code::Unavailable);
    assert_eq!(
        message,
        "[request id: <id_unknown>] Output properties are not available"
    );
    // SAFETY: a live response.
    ok(unsafe { TRITONSERVER_InferenceResponseDelete(response) });

    // With one: it is asked for OUT with the backend's size and preference, and its answer
    // reaches the backend (which writes it into OUT).
    let (sender, asked) = mpsc::channel::<Asked>();
    let sender = Box::into_raw(Box::new(sender));
    // SAFETY: a live allocator and a query function of the right type.
    ok(unsafe { TRITONSERVER_ResponseAllocatorSetQueryFunction(allocator, Some(query)) });
    let response = infer(server, allocator, sender.cast());
    assert_eq!(
        asked.try_recv().ok(),
        Some((Some("OUT".to_string()), Some(16), 1, 1))
    );
    let (mut name, mut datatype, mut shape, mut dims) = (null(), 0u32, null(), 0u64);
    let (mut base, mut size, mut memory, mut memory_id, mut userp) =
        (null(), 0usize, 0u32, 0i64, null_mut());
    // SAFETY: a live response without error, valid out-parameters; the buffer holds
    // `size` bytes.
    unsafe {
        ok(TRITONSERVER_InferenceResponseError(response));
        ok(TRITONSERVER_InferenceResponseOutput(
            response,
            0,
            &mut name,
            &mut datatype,
            &mut shape,
            &mut dims,
            &mut base,
            &mut size,
            &mut memory,
            &mut memory_id,
            &mut userp,
        ));
        let told: Vec<i64> = std::slice::from_raw_parts(base.cast::<u8>(), size)
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(told, vec![2, 3, 16]);
        ok(TRITONSERVER_InferenceResponseDelete(response));
        ok(TRITONSERVER_ResponseAllocatorDelete(allocator));
        ok(TRITONSERVER_ServerDelete(server));
        drop(Box::from_raw(sender));
    }
}
