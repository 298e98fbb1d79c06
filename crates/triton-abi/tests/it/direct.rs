//! The in-process API called directly from Rust through its exported functions, as a C
//! program would call them.

use std::ffi::{c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::mpsc;

use tritonserver::buffer_attributes::*;
use tritonserver::error::{
    ErrorPtr, TRITONSERVER_ErrorCode, TRITONSERVER_ErrorDelete, TRITONSERVER_ErrorMessage,
    TRITONSERVER_Error_Code,
};
use tritonserver::inprocess::allocator::*;
use tritonserver::inprocess::infer::TRITONSERVER_ServerInferAsync;
use tritonserver::inprocess::options::*;
use tritonserver::inprocess::parameter::{
    kind, TRITONSERVER_ParameterDelete, TRITONSERVER_ParameterNew,
};
use tritonserver::inprocess::request::*;
use tritonserver::inprocess::response::*;
use tritonserver::inprocess::server::*;
use tritonserver::inprocess::start::TRITONSERVER_ServerNew;
use tritonserver::inprocess::tensors::*;

use crate::fixture;

/// Panics with the error's message unless `error` is null.
pub(crate) fn ok(error: ErrorPtr) {
    if !error.is_null() {
        // SAFETY: an error this library returned; read, then freed.
        let message = unsafe { CStr::from_ptr(TRITONSERVER_ErrorMessage(error)) }
            .to_string_lossy()
            .into_owned();
        unsafe { TRITONSERVER_ErrorDelete(error) };
        panic!("unexpected error: {message}");
    }
}

/// The code and message of `error` (which must be non-null), freed.
pub(crate) fn failure(error: ErrorPtr) -> (TRITONSERVER_Error_Code, String) {
    assert!(!error.is_null(), "expected an error");
    // SAFETY: an error this library returned; read, then freed.
    unsafe {
        let code = TRITONSERVER_ErrorCode(error);
        let message = CStr::from_ptr(TRITONSERVER_ErrorMessage(error))
            .to_string_lossy()
            .into_owned();
        TRITONSERVER_ErrorDelete(error);
        (code, message)
    }
}

fn c(text: &str) -> CString {
    CString::new(text).expect("no NUL")
}

/// Events the callbacks report, in order.
#[derive(Debug)]
pub(crate) enum Event {
    Response(usize),
    Released,
}

pub(crate) unsafe extern "C" fn on_response(
    response: *mut TRITONSERVER_InferenceResponse,
    flags: u32,
    userp: *mut c_void,
) {
    assert_eq!(flags, 1, "TRITONSERVER_RESPONSE_COMPLETE_FINAL");
    // SAFETY: `userp` is the test's channel.
    let events = unsafe { &*userp.cast::<mpsc::Sender<Event>>() };
    let _ = events.send(Event::Response(response as usize));
}

pub(crate) unsafe extern "C" fn on_release(
    _request: *mut TRITONSERVER_InferenceRequest,
    flags: u32,
    userp: *mut c_void,
) {
    assert_eq!(flags, 1, "TRITONSERVER_REQUEST_RELEASE_ALL");
    // SAFETY: `userp` is the test's channel.
    let events = unsafe { &*userp.cast::<mpsc::Sender<Event>>() };
    let _ = events.send(Event::Released);
}

/// Starts a server on the test repository (EXPLICIT mode, add_sub loaded).
pub(crate) fn start(repository: &std::path::Path) -> *mut TRITONSERVER_Server {
    let mut options = null_mut();
    let mut server = null_mut();
    let path = c(&repository.to_string_lossy());
    // SAFETY: valid pointers and strings throughout.
    unsafe {
        ok(TRITONSERVER_ServerOptionsNew(&mut options));
        ok(TRITONSERVER_ServerOptionsSetModelRepositoryPath(
            options,
            path.as_ptr(),
        ));
        ok(TRITONSERVER_ServerOptionsSetModelControlMode(options, 2));
        ok(TRITONSERVER_ServerOptionsSetStartupModel(
            options,
            c"add_sub".as_ptr(),
        ));
        ok(TRITONSERVER_ServerNew(&mut server, options));
        ok(TRITONSERVER_ServerOptionsDelete(options));
    }
    server
}

/// Submits `request` and returns its response once both callbacks ran, response first.
fn infer(
    server: *mut TRITONSERVER_Server,
    request: *mut TRITONSERVER_InferenceRequest,
    events: &mpsc::Receiver<Event>,
) -> *mut TRITONSERVER_InferenceResponse {
    // SAFETY: a live server and a filled-in request.
    ok(unsafe { TRITONSERVER_ServerInferAsync(server, request, null_mut()) });
    let timeout = std::time::Duration::from_secs(30);
    let Ok(Event::Response(response)) = events.recv_timeout(timeout) else {
        panic!("expected the response first");
    };
    assert!(matches!(events.recv_timeout(timeout), Ok(Event::Released)));
    response as *mut TRITONSERVER_InferenceResponse
}

/// The FP32 values of output `index`.
fn output(response: *mut TRITONSERVER_InferenceResponse, index: u32) -> (String, Vec<f32>) {
    let (mut name, mut datatype, mut shape, mut dims) = (null(), 0u32, null(), 0u64);
    let (mut base, mut size, mut memory, mut memory_id, mut userp) =
        (null(), 0usize, 0u32, 0i64, null_mut());
    // SAFETY: a live response and valid out-parameters; the buffer holds `size` bytes.
    unsafe {
        ok(TRITONSERVER_InferenceResponseOutput(
            response,
            index,
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
        assert_eq!((datatype, dims, memory), (11, 2, 0));
        assert_eq!(std::slice::from_raw_parts(shape, 2), &[1, 4]);
        let bytes = std::slice::from_raw_parts(base.cast::<u8>(), size);
        let values = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        (CStr::from_ptr(name).to_string_lossy().into_owned(), values)
    }
}

#[test]
fn inputs_are_read_at_submission_and_outputs_land_in_the_allocators_buffers() {
    if !fixture::onnx_runtime_available() {
        return;
    }
    let repository = fixture::repository();
    let server = start(repository.path());
    let (sender, events) = mpsc::channel::<Event>();
    let sender = Box::into_raw(Box::new(sender));
    // Read by the library through pointers, so they are cells.
    let memory = std::cell::Cell::new(fixture::Memory::Host);
    let mut allocator = null_mut();
    let mut request = null_mut();
    let in0 = [1.0f32, 2.0, 3.0, 4.0].map(std::cell::Cell::new);
    let in1 = [10.0f32, 20.0, 30.0, 40.0];
    let shape = [1i64, 4];
    // SAFETY: valid pointers throughout; the input arrays outlive every submission.
    unsafe {
        ok(TRITONSERVER_ResponseAllocatorNew(
            &mut allocator,
            Some(fixture::alloc),
            Some(fixture::release),
            None,
        ));
        ok(TRITONSERVER_InferenceRequestNew(
            &mut request,
            server,
            c"add_sub".as_ptr(),
            -1,
        ));
        for name in [c"INPUT0", c"INPUT1"] {
            ok(TRITONSERVER_InferenceRequestAddInput(
                request,
                name.as_ptr(),
                11,
                shape.as_ptr(),
                2,
            ));
        }
        // INPUT0 as C programs append it; INPUT1 as Triton's Python API does, through a
        // buffer-attributes object (pinned host memory is host memory).
        ok(TRITONSERVER_InferenceRequestAppendInputData(
            request,
            c"INPUT0".as_ptr(),
            in0.as_ptr().cast(),
            16,
            0,
            0,
        ));
        let mut attributes = null_mut();
        ok(TRITONSERVER_BufferAttributesNew(&mut attributes));
        ok(TRITONSERVER_BufferAttributesSetByteSize(attributes, 16));
        ok(TRITONSERVER_BufferAttributesSetMemoryType(attributes, 1));
        ok(
            TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
                request,
                c"INPUT1".as_ptr(),
                in1.as_ptr().cast(),
                attributes,
            ),
        );
        // GPU memory without a CUDA driver: refused at once, naming the input.
        ok(TRITONSERVER_BufferAttributesSetMemoryType(attributes, 2));
        let (code, message) = failure(
            TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
                request,
                c"INPUT1".as_ptr(),
                in1.as_ptr().cast(),
                attributes,
            ),
        );
        assert_eq!(code, TRITONSERVER_Error_Code::Unsupported);
        assert!(
            message.starts_with("input 'INPUT1': data in GPU memory: CUDA is not available"),
            "{message}"
        );
        ok(TRITONSERVER_BufferAttributesDelete(attributes));
        let (code, message) = failure(
            TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
                request,
                c"INPUT1".as_ptr(),
                in1.as_ptr().cast(),
                null_mut(),
            ),
        );
        assert_eq!(
            (code, message.as_str()),
            (
                TRITONSERVER_Error_Code::InvalidArg,
                "buffer_attributes must not be null"
            )
        );
        ok(TRITONSERVER_InferenceRequestSetReleaseCallback(
            request,
            Some(on_release),
            sender.cast(),
        ));
        ok(TRITONSERVER_InferenceRequestSetResponseCallback(
            request,
            allocator,
            memory.as_ptr().cast(),
            Some(on_response),
            sender.cast(),
        ));

        let response = infer(server, request, &events);
        ok(TRITONSERVER_InferenceResponseError(response));
        assert_eq!(
            output(response, 0),
            ("OUTPUT0".into(), vec![11.0, 22.0, 33.0, 44.0])
        );
        assert_eq!(
            output(response, 1),
            ("OUTPUT1".into(), vec![-9.0, -18.0, -27.0, -36.0])
        );
        ok(TRITONSERVER_InferenceResponseDelete(response));

        // Changed in place, as Triton's simple.cc does: the next submission reads it.
        in0[0].set(27.0);
        let response = infer(server, request, &events);
        assert_eq!(output(response, 0).1[0], 37.0);
        ok(TRITONSERVER_InferenceResponseDelete(response));

        // An allocator that hands out GPU memory, without CUDA here, fails the response
        // (not the process).
        memory.set(fixture::Memory::Gpu);
        let response = infer(server, request, &events);
        let (code, message) = failure(TRITONSERVER_InferenceResponseError(response));
        assert_eq!(code, TRITONSERVER_Error_Code::Unsupported);
        assert!(
            message.contains("the allocator returned GPU memory, which could not be written"),
            "{message}"
        );
        let mut count = 9;
        ok(TRITONSERVER_InferenceResponseOutputCount(
            response, &mut count,
        ));
        assert_eq!(count, 0);
        ok(TRITONSERVER_InferenceResponseDelete(response));

        ok(TRITONSERVER_InferenceRequestDelete(request));
        ok(TRITONSERVER_ResponseAllocatorDelete(allocator));
        ok(TRITONSERVER_ServerDelete(server));
        drop(Box::from_raw(sender));
    }
}

#[test]
fn server_new_without_a_repository_is_refused() {
    let mut options = null_mut();
    let mut server = null_mut();
    // SAFETY: valid pointers throughout.
    unsafe {
        ok(TRITONSERVER_ServerOptionsNew(&mut options));
        let (code, message) = failure(TRITONSERVER_ServerNew(&mut server, options));
        assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg);
        assert_eq!(message, "--model-repository must be specified");
        assert!(server.is_null());
        let (code, _) = failure(TRITONSERVER_ServerNew(null_mut(), options));
        assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg);
        ok(TRITONSERVER_ServerOptionsDelete(options));
    }
}

/// What the re-entrant release callback needs.
struct Reentry {
    server: *mut TRITONSERVER_Server,
    done: mpsc::Sender<String>,
}

unsafe extern "C" fn index_on_release(
    _request: *mut TRITONSERVER_InferenceRequest,
    _flags: u32,
    userp: *mut c_void,
) {
    // SAFETY: `userp` is the test's `Reentry`; the server outlives the request.
    let reentry = unsafe { &*userp.cast::<Reentry>() };
    let mut message = null_mut();
    let (mut base, mut size) = (null(), 0usize);
    // SAFETY: a live server and valid out-parameters.
    let json = unsafe {
        ok(
            tritonserver::inprocess::server::TRITONSERVER_ServerModelIndex(
                reentry.server,
                1,
                &mut message,
            ),
        );
        ok(
            tritonserver::inprocess::message::TRITONSERVER_MessageSerializeToJson(
                message, &mut base, &mut size,
            ),
        );
        let json = String::from_utf8_lossy(std::slice::from_raw_parts(base.cast::<u8>(), size))
            .into_owned();
        ok(tritonserver::inprocess::message::TRITONSERVER_MessageDelete(message));
        json
    };
    let _ = reentry.done.send(json);
}

unsafe extern "C" fn drop_response(
    response: *mut TRITONSERVER_InferenceResponse,
    _flags: u32,
    _userp: *mut c_void,
) {
    // SAFETY: the response handed to this callback, owned by it.
    ok(unsafe { TRITONSERVER_InferenceResponseDelete(response) });
}

#[test]
fn a_callback_may_call_back_into_the_server() {
    if !fixture::onnx_runtime_available() {
        return;
    }
    let repository = fixture::repository();
    let server = start(repository.path());
    let (done, finished) = mpsc::channel();
    let reentry = Box::into_raw(Box::new(Reentry { server, done }));
    let mut memory = fixture::Memory::Host;
    let mut allocator = null_mut();
    let mut request = null_mut();
    let data = [0.5f32; 4];
    let shape = [1i64, 4];
    // SAFETY: valid pointers throughout; `data` outlives the submission.
    unsafe {
        ok(TRITONSERVER_ResponseAllocatorNew(
            &mut allocator,
            Some(fixture::alloc),
            Some(fixture::release),
            None,
        ));
        ok(TRITONSERVER_InferenceRequestNew(
            &mut request,
            server,
            c"add_sub".as_ptr(),
            -1,
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
                data.as_ptr().cast(),
                16,
                0,
                0,
            ));
        }
        ok(TRITONSERVER_InferenceRequestSetReleaseCallback(
            request,
            Some(index_on_release),
            reentry.cast(),
        ));
        ok(TRITONSERVER_InferenceRequestSetResponseCallback(
            request,
            allocator,
            (&mut memory as *mut fixture::Memory).cast(),
            Some(drop_response),
            null_mut(),
        ));
        ok(TRITONSERVER_ServerInferAsync(server, request, null_mut()));
        let json = finished
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the release callback ran");
        assert!(json.contains("\"name\":\"add_sub\""), "{json}");
        ok(TRITONSERVER_InferenceRequestDelete(request));
        ok(TRITONSERVER_ResponseAllocatorDelete(allocator));
        ok(TRITONSERVER_ServerDelete(server));
        drop(Box::from_raw(reentry));
    }
}

/// `TRITONSERVER_ServerRegisterModelRepository` / `Unregister`: a repository added while
/// the server runs serves its models under their mapped names, with Triton's checks.
#[test]
fn a_registered_repository_serves_its_models_under_their_mapped_names() {
    if !fixture::onnx_runtime_available() {
        return;
    }
    let startup = tempfile::tempdir().expect("temporary directory");
    let archive = fixture::repository();
    let (startup_path, archive_path) = (
        c(&startup.path().to_string_lossy()),
        c(&archive.path().to_string_lossy()),
    );
    let mut options = null_mut();
    let mut server = null_mut();
    // SAFETY: valid pointers and strings throughout; parameters deleted after use.
    unsafe {
        ok(TRITONSERVER_ServerOptionsNew(&mut options));
        ok(TRITONSERVER_ServerOptionsSetModelRepositoryPath(
            options,
            startup_path.as_ptr(),
        ));
        ok(TRITONSERVER_ServerOptionsSetModelControlMode(options, 2));
        ok(TRITONSERVER_ServerNew(&mut server, options));
        ok(TRITONSERVER_ServerOptionsDelete(options));

        let renamed = c("renamed");
        let mapping = TRITONSERVER_ParameterNew(
            c"add_sub".as_ptr(),
            kind::STRING,
            renamed.as_ptr().cast::<c_void>(),
        );
        let count: i64 = 3;
        let not_a_name = TRITONSERVER_ParameterNew(
            c"add_sub".as_ptr(),
            kind::INT,
            (&raw const count).cast::<c_void>(),
        );
        let (code, message) = failure(TRITONSERVER_ServerRegisterModelRepository(
            server,
            archive_path.as_ptr(),
            [not_a_name.cast_const()].as_ptr(),
            1,
        ));
        assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg);
        assert_eq!(
            message,
            "Mapped model name must be a string, found another type for add_sub"
        );
        let (code, message) = failure(TRITONSERVER_ServerRegisterModelRepository(
            server,
            archive_path.as_ptr(),
            null(),
            1,
        ));
        assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg);
        assert_eq!(
            message,
            "model mappings are not provided while mapping count is non-zero"
        );

        ok(TRITONSERVER_ServerRegisterModelRepository(
            server,
            archive_path.as_ptr(),
            [mapping.cast_const()].as_ptr(),
            1,
        ));
        ok(TRITONSERVER_ServerLoadModel(server, renamed.as_ptr()));
        let mut ready = false;
        ok(TRITONSERVER_ServerModelIsReady(
            server,
            renamed.as_ptr(),
            -1,
            &mut ready,
        ));
        assert!(ready, "the mapped directory serves as 'renamed'");

        ok(TRITONSERVER_ServerUnregisterModelRepository(
            server,
            archive_path.as_ptr(),
        ));
        let (code, _) = failure(TRITONSERVER_ServerUnregisterModelRepository(
            server,
            archive_path.as_ptr(),
        ));
        assert_eq!(code, TRITONSERVER_Error_Code::InvalidArg);
        // Its loaded model stays loaded, as in Triton.
        ok(TRITONSERVER_ServerModelIsReady(
            server,
            renamed.as_ptr(),
            -1,
            &mut ready,
        ));
        assert!(ready);

        TRITONSERVER_ParameterDelete(mapping);
        TRITONSERVER_ParameterDelete(not_a_name);
        ok(TRITONSERVER_ServerDelete(server));
    }
}
