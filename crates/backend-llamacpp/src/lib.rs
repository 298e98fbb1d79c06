//! The llama.cpp backend (`backend: "llamacpp"`): GGUF language models generated on the
//! CPU inside the server, no Python, with continuous batching across the requests of
//! each instance.
//!
//! A model folder is laid out as for Triton's vLLM backend: `config.pbtxt` in its
//! tensor convention (`text_input`, `stream`, `sampling_parameters`, ... in;
//! `text_output`, ... out; decoupled) and `<version>/model.json` with the engine's
//! arguments, here the GGUF file and the engine's sizes ([`engine_args`]). So the
//! OpenAI routes, KServe `generate`/`generate_stream` and gRPC streaming serve it as
//! they serve a vLLM model, and a vLLM user migrates by renaming the backend and
//! pointing `model.json` at a GGUF file.

mod autocomplete;
mod engine;
pub mod engine_args;
mod instance;
mod metrics;
mod model;
mod request;
mod sampling;
mod text;

use std::path::Path;
use std::sync::Arc;

use nereid_core::backend::{Backend, InstanceBackend, InstanceConfig, ModelBackend};
use nereid_core::config::ModelConfig;
use nereid_core::model::{InstanceKind, ModelSpec};
use nereid_core::{Error, Result};

use engine::Engine;
use engine_args::EngineArgs;
use metrics::EngineMetrics;
use model::Llm;

pub use metrics::render as render_metrics;

/// The backend's name in `config.pbtxt`.
pub const NAME: &str = "llamacpp";

/// The llama.cpp backend; one per server.
#[derive(Debug, Default)]
pub struct LlamaCppBackend;

impl Backend for LlamaCppBackend {
    fn name(&self) -> &str {
        NAME
    }

    /// Its ONNX Runtime or llama.cpp runs on the CPU.
    fn preferred_instance_groups(&self) -> Vec<nereid_proto::inference::ModelInstanceGroup> {
        nereid_core::backend::cpu_instances_only()
    }

    fn default_model_filename(&self) -> &'static str {
        "model.json"
    }

    fn autocomplete(&self, config: &mut ModelConfig, _model_file: &Path) -> Result<()> {
        autocomplete::complete(config);
        Ok(())
    }

    /// A `model.json` alone does not say which backend reads it (Triton's vLLM backend
    /// reads the same file name), so models name this backend.
    fn detected_by_file(&self) -> bool {
        false
    }

    fn load_model(&self, spec: Arc<ModelSpec>, model_file: &Path) -> Result<Box<dyn ModelBackend>> {
        if !spec.decoupled {
            return Err(Error::invalid_arg(format!(
                "model '{}': the llamacpp backend streams its answers and needs model_transaction_policy {{ decoupled: true }}",
                spec.name
            )));
        }
        let args = EngineArgs::read(&spec.name, model_file)?;
        let llm = Llm::load(&spec.name, args)?;
        Ok(Box::new(LlamaCppModel {
            llm: Arc::new(llm),
            metrics: EngineMetrics::register(&spec.name, spec.version),
        }))
    }
}

/// A loaded GGUF model version: one engine per instance over shared weights.
struct LlamaCppModel {
    llm: Arc<Llm>,
    metrics: Arc<EngineMetrics>,
}

impl ModelBackend for LlamaCppModel {
    fn create_instance(&self, instance: &InstanceConfig) -> Result<Box<dyn InstanceBackend>> {
        if let InstanceKind::Gpu(device) = instance.kind {
            return Err(Error::unsupported(format!(
                "instance {} of model '{}' asks for GPU {device}, but the llamacpp backend is built for the CPU only",
                instance.name, self.llm.name
            )));
        }
        let engine = Engine::start(self.llm.clone(), self.metrics.clone(), &instance.name)?;
        Ok(Box::new(instance::LlamaCppInstance::new(
            self.llm.clone(),
            engine,
        )))
    }
}
