//! The backend registry a server starts with: the ONNX Runtime backends when the library
//! is found, configured from `--backend-config`, the llama.cpp backend, plus the
//! caller's own backends.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use nereid_backend_llamacpp::LlamaCppBackend;
use nereid_backend_onnx::{find_library, OnnxBackend, OrtRuntime, StatefulBackend};
use nereid_core::backend::cmdline_config;
use nereid_core::repository::BackendRegistry;
use nereid_core::{Error, Result};

use crate::Options;

/// tritonserver's `--backend-directory` default, where backend libraries the registry has
/// no native implementation for are looked up (`<directory>/<name>/libtriton_<name>.so`).
pub const DEFAULT_BACKEND_DIRECTORY: &str = "/opt/tritonserver/backends";

/// The registry for `options`. A missing ONNX Runtime library is logged, not fatal: the
/// other backends still serve, and ONNX models fail to load with a reason.
pub fn registry(options: &Options) -> Result<BackendRegistry> {
    let mut registry = BackendRegistry::new();
    let explicit = options
        .backend_setting("onnxruntime", "library-path")
        .map(PathBuf::from);
    let default_max_batch_size = options
        .backend_setting("onnxruntime", "default-max-batch-size")
        .map(|v| {
            v.parse().map_err(|_| {
                Error::invalid_arg(format!(
                    "--backend-config onnxruntime,default-max-batch-size={v}: not an integer"
                ))
            })
        })
        .transpose()?;
    match find_library(explicit.as_deref()) {
        Some(library_path) => {
            let runtime = ort_runtime(library_path);
            let onnx = OnnxBackend::new(runtime.clone(), default_max_batch_size);
            // Triton's ONNX Runtime backend logs the settings it was given when it starts
            // (L0_backend_config reads them).
            let settings = cmdline_config(
                "onnxruntime",
                &options.backend_directory,
                options.strict_model_config,
                &options.backend_config,
            );
            tracing::debug!("backend configuration:\n{settings}");
            registry.insert("onnxruntime", Arc::new(onnx));
            registry.insert("stateful", Arc::new(StatefulBackend::new(runtime)));
        }
        None => tracing::error!(
            "ONNX Runtime library not found: set ORT_DYLIB_PATH, pass --backend-config=onnxruntime,library-path=<libonnxruntime.so>, or install the onnxruntime wheel into ./.venv; ONNX models will fail to load"
        ),
    }
    registry.insert(nereid_backend_llamacpp::NAME, Arc::new(LlamaCppBackend));
    registry.extend(
        options
            .extra_backends
            .native()
            .map(|(name, backend)| (name.clone(), backend.clone())),
    );
    if let Some(loader) = &options.backend_loader {
        registry.set_loader(loader.clone());
    }
    Ok(registry)
}

/// Appends the metrics native backends keep themselves (the llama.cpp engines': slots,
/// queue, tokens, token timing) to a metrics scrape.
pub fn render_metrics(out: &mut String) {
    nereid_backend_llamacpp::render_metrics(out);
}

/// The process's ONNX Runtime: ORT allows one environment per process, so every server a
/// program starts (one after another, or side by side, as an in-process C program may)
/// shares the first one's; a later server asking for another library gets the one
/// already loaded.
fn ort_runtime(path: PathBuf) -> Arc<OrtRuntime> {
    static RUNTIME: OnceLock<Arc<OrtRuntime>> = OnceLock::new();
    RUNTIME.get_or_init(|| OrtRuntime::new(path)).clone()
}
