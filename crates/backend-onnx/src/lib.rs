//! The ONNX Runtime backend (`backend: "onnxruntime"`, `platform: "onnxruntime_onnx"`).
//!
//! ONNX Runtime is loaded at run time from a shared library (by default the one the
//! `onnxruntime` Python wheel ships in the project's virtualenv), so the binary builds
//! without it and no download happens at build time. Each model instance owns one ORT
//! session and is driven by its own worker thread.

mod autocomplete;
mod convert;
mod instance;
mod io_check;
mod library;
mod session_options;
mod stateful;
mod strings;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use nereid_core::backend::{Backend, InstanceBackend, InstanceConfig, ModelBackend};
use nereid_core::config::ModelConfig;
use nereid_core::model::InstanceKind;
use nereid_core::model::ModelSpec;
use nereid_core::{Error, Result};

pub use library::find_library;
pub use stateful::StatefulBackend;

/// ONNX Runtime itself: the shared library and the one process-wide environment that
/// every ORT-based backend ([`OnnxBackend`], [`StatefulBackend`]) shares, so that they
/// can live side by side in one server (the original stateful backend could not).
pub struct OrtRuntime {
    library_path: PathBuf,
    // Created on first use, so a server without ONNX models never loads the library.
    environment: OnceLock<Result<Arc<ort::environment::Environment>>>,
}

impl OrtRuntime {
    /// A runtime that will load `library_path` (a `libonnxruntime.so`) when the first
    /// ONNX model is loaded.
    pub fn new(library_path: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            library_path,
            environment: OnceLock::new(),
        })
    }

    /// The library this runtime loads.
    pub fn library_path(&self) -> &Path {
        &self.library_path
    }

    /// The process-wide ORT environment, loading the library the first time. It lives as
    /// long as the server, so models can be unloaded and loaded again.
    pub fn environment(&self) -> Result<Arc<ort::environment::Environment>> {
        self.environment
            .get_or_init(|| {
                let path = &self.library_path;
                let builder = ort::init_from(path).map_err(|e| {
                    Error::internal(format!(
                        "unable to load ONNX Runtime from {}: {e}",
                        path.display()
                    ))
                })?;
                let environment = builder.with_name("nereid").build().map_err(|e| {
                    Error::internal(format!(
                        "unable to create the ONNX Runtime environment: {e}"
                    ))
                })?;
                tracing::info!(library = %path.display(), "ONNX Runtime loaded");
                Ok(Arc::new(environment))
            })
            .clone()
    }
}

/// Triton's `default-max-batch-size` when `--backend-config` does not set it.
pub const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

/// The ONNX Runtime backend; one per server.
pub struct OnnxBackend {
    runtime: Arc<OrtRuntime>,
    /// `max_batch_size` that auto-completion gives a model whose inputs and outputs all
    /// have a variable first dimension (`--backend-config`'s `default-max-batch-size`,
    /// `None` when not given: [`DEFAULT_MAX_BATCH_SIZE`]).
    default_max_batch_size: Option<i32>,
}

impl OnnxBackend {
    /// The backend over `runtime`; `default_max_batch_size` as Triton's
    /// `--backend-config=onnxruntime,default-max-batch-size`, if given.
    pub fn new(runtime: Arc<OrtRuntime>, default_max_batch_size: Option<i32>) -> Self {
        Self {
            runtime,
            default_max_batch_size,
        }
    }

    /// Logs, as Triton does for each model it creates, where the model's
    /// `default-max-batch-size` came from (L0_backend_config reads these lines).
    fn log_default_max_batch_size(&self) {
        match self.default_max_batch_size {
            Some(given) => {
                tracing::debug!("Found overwritten default setting: default-max-batch-size,{given}")
            }
            None => tracing::debug!(
                "Adding default backend config setting: default-max-batch-size,{DEFAULT_MAX_BATCH_SIZE}"
            ),
        }
    }
}

impl Backend for OnnxBackend {
    fn name(&self) -> &str {
        "onnxruntime"
    }

    /// Its ONNX Runtime or llama.cpp runs on the CPU.
    fn preferred_instance_groups(&self) -> Vec<nereid_proto::inference::ModelInstanceGroup> {
        nereid_core::backend::cpu_instances_only()
    }

    fn default_model_filename(&self) -> &'static str {
        "model.onnx"
    }

    fn autocomplete(&self, config: &mut ModelConfig, model_file: &Path) -> Result<()> {
        let environment = self.runtime.environment()?;
        let session = session_options::probe_session(&environment, &config.name, model_file)?;
        let default_max_batch_size = self
            .default_max_batch_size
            .unwrap_or(DEFAULT_MAX_BATCH_SIZE);
        autocomplete::complete(config, &session, default_max_batch_size)
    }

    fn load_model(&self, spec: Arc<ModelSpec>, model_file: &Path) -> Result<Box<dyn ModelBackend>> {
        self.log_default_max_batch_size();
        Ok(Box::new(OnnxModel {
            environment: self.runtime.environment()?,
            spec,
            model_file: model_file.to_path_buf(),
        }))
    }
}

/// A loaded ONNX model version: creates one session per instance.
struct OnnxModel {
    environment: Arc<ort::environment::Environment>,
    spec: Arc<ModelSpec>,
    model_file: PathBuf,
}

impl ModelBackend for OnnxModel {
    fn create_instance(&self, instance: &InstanceConfig) -> Result<Box<dyn InstanceBackend>> {
        if let InstanceKind::Gpu(device) = instance.kind {
            return Err(Error::unsupported(format!(
                "instance {} of model '{}' asks for GPU {device}, but this ONNX Runtime build runs on the CPU only",
                instance.name, self.spec.name
            )));
        }
        let session =
            session_options::build_session(&self.environment, &self.spec, &self.model_file)?;
        io_check::check_io(&self.spec, &session)?;
        let run_options = session_options::run_options(&self.spec)?;
        Ok(Box::new(instance::OnnxInstance::new(session, run_options)))
    }
}
