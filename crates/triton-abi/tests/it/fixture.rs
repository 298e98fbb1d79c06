//! The test model repository and the checks for what the tests need (ONNX Runtime, a C
//! compiler).

use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::ptr::null_mut;

use tritonserver::error::ErrorPtr;
use tritonserver::inprocess::allocator::TRITONSERVER_ResponseAllocator;

/// The workspace root (ONNX Runtime is found through its `.venv`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate sits two levels below the workspace root")
        .to_path_buf()
}

/// Skips a test whose dependency is missing, saying which; under `CI=true` a skipped test
/// fails instead, so CI cannot pass without having run it (as the python suite does).
pub fn skip(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why} (CI=true: a skipped test fails)");
    }
    eprintln!("skipped: {why}");
}

/// Whether ONNX Runtime can be found; tests that need it say why they skip.
pub fn onnx_runtime_available() -> bool {
    let found = std::env::var_os("ORT_DYLIB_PATH").is_some() || {
        let lib = workspace_root().join(".venv/lib");
        std::fs::read_dir(lib).is_ok_and(|entries| {
            entries.flatten().any(|python| {
                python
                    .path()
                    .join("site-packages/onnxruntime/capi")
                    .is_dir()
            })
        })
    };
    if !found {
        skip("ONNX Runtime not found (set ORT_DYLIB_PATH or run scripts/setup.sh)");
    }
    found
}

/// A repository with `add_sub` (FP32 [4], batching) and `add_sub_cached` (the same model
/// with the response cache enabled).
pub fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let source = workspace_root().join("examples/models/add_sub");
    let config =
        std::fs::read_to_string(source.join("config.pbtxt")).expect("add_sub config.pbtxt");
    for (name, extra) in [
        ("add_sub", ""),
        ("add_sub_cached", "response_cache { enable: true }\n"),
    ] {
        let model = dir.path().join(name);
        std::fs::create_dir_all(model.join("1")).expect("model directory");
        std::fs::copy(source.join("1/model.onnx"), model.join("1/model.onnx")).expect("model");
        let config = config.replace("name: \"add_sub\"", &format!("name: \"{name}\""));
        std::fs::write(model.join("config.pbtxt"), format!("{config}{extra}")).expect("config");
    }
    dir
}

/// The response allocator's release function for the tests' host buffers: `alloc` stores
/// a boxed `[u8]` as the buffer and its boxed length as `buffer_userp`.
///
/// # Safety
/// Called by the server with a buffer and user pointer an `alloc` of that shape made.
pub unsafe extern "C" fn release(
    _allocator: *mut TRITONSERVER_ResponseAllocator,
    buffer: *mut c_void,
    buffer_userp: *mut c_void,
    _size: usize,
    _memory_type: u32,
    _memory_type_id: i64,
) -> ErrorPtr {
    // SAFETY: the buffer and its length from `alloc`.
    unsafe {
        let size = *Box::from_raw(buffer_userp.cast::<usize>());
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            buffer.cast::<u8>(),
            size,
        )));
    }
    null_mut()
}

/// What the allocator should hand out: host memory, or (wrongly) "GPU" memory.
#[derive(Clone, Copy, PartialEq)]
pub enum Memory {
    Host,
    Gpu,
}

/// The response allocator's allocation function for the tests: a boxed `[u8]` of the
/// asked size as the buffer, its boxed length as `buffer_userp` (freed by [`release`]).
/// The allocator's user pointer is a [`Memory`] saying what to report, or null for host
/// memory.
///
/// # Safety
/// Called by the server with valid out-parameters and such a user pointer.
pub unsafe extern "C" fn alloc(
    _allocator: *mut TRITONSERVER_ResponseAllocator,
    _name: *const c_char,
    size: usize,
    _memory_type: u32,
    _memory_type_id: i64,
    userp: *mut c_void,
    buffer: *mut *mut c_void,
    buffer_userp: *mut *mut c_void,
    actual_memory_type: *mut u32,
    actual_memory_type_id: *mut i64,
) -> ErrorPtr {
    // SAFETY: `userp` is null or the `Memory` the test passed; the out-parameters are
    // valid.
    unsafe {
        let memory = userp
            .cast::<Memory>()
            .as_ref()
            .copied()
            .unwrap_or(Memory::Host);
        let storage = Box::into_raw(vec![0u8; size].into_boxed_slice());
        buffer.write(storage.cast());
        buffer_userp.write(Box::into_raw(Box::new(size)).cast());
        actual_memory_type.write(if memory == Memory::Gpu { 2 } else { 0 });
        actual_memory_type_id.write(0);
    }
    null_mut()
}
