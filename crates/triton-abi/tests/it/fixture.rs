//! The test model repository and the checks for what the tests need (ONNX Runtime, a C
//! compiler).

use std::path::{Path, PathBuf};

/// The workspace root (ONNX Runtime is found through its `.venv`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate sits two levels below the workspace root")
        .to_path_buf()
}

/// Whether ONNX Runtime can be found; tests that need it print why they skip.
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
        eprintln!("skipped: ONNX Runtime not found (set ORT_DYLIB_PATH or run scripts/setup.sh)");
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
