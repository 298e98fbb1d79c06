//! `TRITONSERVER_ServerInferAsync` on a decoupled model: the response callback gets each
//! response with flags 0, then COMPLETE_FINAL (here with a null response, as the backend
//! sends the final flag alone), then the release callback runs. The model is the C test
//! backend (tests/backend/test_backend.c) in its `decoupled` mode, which answers from a
//! thread of its own after its execute returned. With `histogram_latencies` set through
//! the options, the first response of each request is observed, a final flag alone not.

use std::ffi::{c_void, CStr};
use std::path::Path;
use std::ptr::{null, null_mut};
use std::sync::mpsc;
use std::time::Duration;

use tritonserver::error::{ErrorPtr, TRITONSERVER_ErrorDelete, TRITONSERVER_ErrorMessage};
use tritonserver::inprocess::allocator::*;
use tritonserver::inprocess::infer::TRITONSERVER_ServerInferAsync;
use tritonserver::inprocess::options::*;
use tritonserver::inprocess::request::*;
use tritonserver::inprocess::response::*;
use tritonserver::inprocess::server::*;
use tritonserver::inprocess::start::TRITONSERVER_ServerNew;
use tritonserver::inprocess::tensors::*;

use crate::fixture;

/// `TRITONSERVER_RESPONSE_COMPLETE_FINAL`
const FINAL: u32 = 1;
/// `TRITONSERVER_TYPE_INT32`
const TYPE_INT32: u32 = 8;

fn ok(error: ErrorPtr) {
    if !error.is_null() {
        // SAFETY: an error this library returned; read, then freed.
        let message = unsafe { CStr::from_ptr(TRITONSERVER_ErrorMessage(error)) }
            .to_string_lossy()
            .into_owned();
        unsafe { TRITONSERVER_ErrorDelete(error) };
        panic!("unexpected error: {message}");
    }
}

/// What the callbacks report, in order.
#[derive(Debug, PartialEq)]
enum Event {
    /// The OUT values of a response (`None`: a null response) and its flags.
    Response(Option<Vec<i32>>, u32),
    Released,
}

/// Reads OUT from a response and frees it (its buffers go back to the allocator).
fn values(response: *mut TRITONSERVER_InferenceResponse) -> Vec<i32> {
    let (mut name, mut datatype, mut shape, mut dims) = (null(), 0u32, null(), 0u64);
    let (mut base, mut size, mut memory, mut memory_id, mut userp) =
        (null(), 0usize, 0u32, 0i64, null_mut());
    // SAFETY: a live response the callback now owns; the buffer holds `size` bytes.
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
        assert_eq!(CStr::from_ptr(name).to_str(), Ok("OUT"));
        assert_eq!(datatype, TYPE_INT32);
        let values = std::slice::from_raw_parts(base.cast::<u8>(), size)
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        ok(TRITONSERVER_InferenceResponseDelete(response));
        values
    }
}

unsafe extern "C" fn on_response(
    response: *mut TRITONSERVER_InferenceResponse,
    flags: u32,
    userp: *mut c_void,
) {
    let values = (!response.is_null()).then(|| values(response));
    // SAFETY: `userp` is the test's channel.
    let events = unsafe { &*userp.cast::<mpsc::Sender<Event>>() };
    let _ = events.send(Event::Response(values, flags));
}

unsafe extern "C" fn on_release(
    _request: *mut TRITONSERVER_InferenceRequest,
    _flags: u32,
    userp: *mut c_void,
) {
    // SAFETY: `userp` is the test's channel.
    let events = unsafe { &*userp.cast::<mpsc::Sender<Event>>() };
    let _ = events.send(Event::Released);
}

/// Builds the C test backend as `<dir>/nereid_test/libtriton_nereid_test.so`; false
/// (with the reason printed) when there is no C compiler.
pub(crate) fn build_backend(dir: &Path) -> bool {
    let source = fixture::workspace_root().join("crates/triton-abi/tests/backend/test_backend.c");
    let target = dir.join("nereid_test/libtriton_nereid_test.so");
    std::fs::create_dir_all(dir.join("nereid_test")).expect("backend directory");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&target)
        .arg(&source)
        .arg("-lpthread")
        .status();
    match built {
        Ok(status) if status.success() => true,
        Ok(status) => panic!("the test backend does not build: {status}"),
        Err(e) => {
            crate::fixture::skip(&format!(
                "no C compiler (cc) to build the test backend: {e}"
            ));
            false
        }
    }
}

/// A repository with the decoupled model `streaming` on the test backend.
fn repository(dir: &Path) {
    let model = dir.join("streaming");
    std::fs::create_dir_all(model.join("1")).expect("model directory");
    std::fs::write(
        model.join("config.pbtxt"),
        r#"name: "streaming"
backend: "nereid_test"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "mode" value { string_value: "decoupled" } }
model_transaction_policy { decoupled: true }
"#,
    )
    .expect("config");
}

#[test]
fn each_response_then_a_null_final_response_then_the_release() {
    let dir = tempfile::tempdir().expect("temporary directory");
    if !build_backend(&dir.path().join("backends")) {
        return;
    }
    repository(&dir.path().join("models"));
    let (sender, events) = mpsc::channel::<Event>();
    let sender = Box::into_raw(Box::new(sender));
    let (mut options, mut server, mut allocator, mut request) =
        (null_mut(), null_mut(), null_mut(), null_mut());
    let models = std::ffi::CString::new(dir.path().join("models").to_string_lossy().as_ref())
        .expect("no NUL");
    let backends = std::ffi::CString::new(dir.path().join("backends").to_string_lossy().as_ref())
        .expect("no NUL");
    let count = std::cell::Cell::new(3i32);
    let shape = [1i64];
    let timeout = Duration::from_secs(30);
    // SAFETY: valid pointers throughout; `count` outlives every submission.
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
        for (setting, value) in [
            (c"histogram_latencies", c"true"),
            (c"counter_latencies", c"false"),
        ] {
            ok(TRITONSERVER_ServerOptionsSetMetricsConfig(
                options,
                c"".as_ptr(),
                setting.as_ptr(),
                value.as_ptr(),
            ));
        }
        ok(TRITONSERVER_ServerOptionsSetMetricsInterval(options, 50));
        ok(TRITONSERVER_ServerNew(&mut server, options));
        ok(TRITONSERVER_ServerOptionsDelete(options));
        ok(TRITONSERVER_ResponseAllocatorNew(
            &mut allocator,
            Some(fixture::alloc),
            Some(fixture::release),
            None,
        ));
        ok(TRITONSERVER_InferenceRequestNew(
            &mut request,
            server,
            c"streaming".as_ptr(),
            -1,
        ));
        ok(TRITONSERVER_InferenceRequestAddInput(
            request,
            c"IN".as_ptr(),
            TYPE_INT32,
            shape.as_ptr(),
            1,
        ));
        ok(TRITONSERVER_InferenceRequestAppendInputData(
            request,
            c"IN".as_ptr(),
            count.as_ptr().cast(),
            4,
            0,
            0,
        ));
        ok(TRITONSERVER_InferenceRequestSetReleaseCallback(
            request,
            Some(on_release),
            sender.cast(),
        ));
        ok(TRITONSERVER_InferenceRequestSetResponseCallback(
            request,
            allocator,
            null_mut(),
            Some(on_response),
            sender.cast(),
        ));

        for (n, responses) in [(3, vec![vec![0], vec![1], vec![2]]), (0, vec![])] {
            count.set(n);
            ok(TRITONSERVER_ServerInferAsync(server, request, null_mut()));
            let mut expected: Vec<Event> = responses
                .into_iter()
                .map(|values| Event::Response(Some(values), 0))
                .collect();
            expected.push(Event::Response(None, FINAL));
            expected.push(Event::Released);
            let seen: Vec<Event> = expected
                .iter()
                .map(|_| events.recv_timeout(timeout).expect("a callback"))
                .collect();
            assert_eq!(seen, expected, "{n} responses");
        }
        // The CPU gauges appear once the 50 ms poll has run (later on a loaded machine).
        let mut text = crate::metrics_options::metrics_text(server);
        for _ in 0..100 {
            if text.contains("\nnv_cpu_utilization ") {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            text = crate::metrics_options::metrics_text(server);
        }
        let family = "nv_inference_first_response_histogram_ms";
        let labels = "model=\"streaming\",version=\"1\"";
        assert!(
            text.contains(&format!("{family}_count{{{labels}}} 1\n")),
            "one first response (the second request sent a final flag alone): {text}"
        );
        assert!(text.contains(&format!("{family}_bucket{{{labels},le=\"+Inf\"}} 1\n")));
        assert!(!text.contains("nv_inference_request_duration_us"), "{text}");
        assert!(text.contains("\nnv_cpu_utilization "), "{text}");

        ok(TRITONSERVER_InferenceRequestDelete(request));
        ok(TRITONSERVER_ResponseAllocatorDelete(allocator));
        ok(TRITONSERVER_ServerDelete(server));
        drop(Box::from_raw(sender));
    }
}
