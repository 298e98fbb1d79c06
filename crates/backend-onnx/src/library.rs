//! Finding `libonnxruntime.so`: an explicit path, `ORT_DYLIB_PATH`, or the `onnxruntime`
//! Python wheel inside a `.venv` next to the working directory or above the executable.

use std::path::{Path, PathBuf};

/// The library to load: `explicit` (from `--backend-config=onnxruntime,library-path=...`),
/// else `ORT_DYLIB_PATH`, else the first wheel library found under a `.venv`.
pub fn find_library(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
        return Some(PathBuf::from(p));
    }
    let mut bases = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        bases.push(cwd);
    }
    if let Ok(exe) = std::env::current_exe() {
        bases.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    bases
        .iter()
        .find_map(|base| wheel_library(&base.join(".venv")))
}

/// `<venv>/lib/python*/site-packages/onnxruntime/capi/libonnxruntime.so*`.
fn wheel_library(venv: &Path) -> Option<PathBuf> {
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    lib.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
        .find_map(|python| {
            let capi = python.path().join("site-packages/onnxruntime/capi");
            let mut libs: Vec<PathBuf> = std::fs::read_dir(capi)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libonnxruntime.so"))
                })
                .collect();
            libs.sort();
            libs.pop()
        })
}
