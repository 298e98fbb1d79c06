//! The stateful backend (`backend: "stateful"`), after Triton's stateful_backend: ONNX
//! models whose state tensors the server keeps per sequence. The config lists only the
//! client tensors; `state_pairs` names the ONNX inputs fed with each sequence's stored
//! state and the outputs that replace it, and the sequence START drives the model's
//! boolean reset input. Unlike the original, it shares the ORT environment with the
//! `onnxruntime` backend and can be unloaded and loaded again.
//!
//! - [`params`]: the model parameters and their checks.
//! - [`plan`]: the model checked against its ONNX graph, and how each tensor is batched.
//! - [`layout`]: batching along any dimension.
//! - [`store`]: per-instance state buffers, reserved eagerly or grown lazily.
//! - [`instance`]: the execution.

mod instance;
mod layout;
mod params;
mod plan;
mod report;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ort::ep::{ExecutionProviderDispatch, TensorRT, CUDA};

use nereid_core::backend::{Backend, InstanceBackend, InstanceConfig, ModelBackend};
use nereid_core::config::ModelConfig;
use nereid_core::model::InstanceKind;
use nereid_core::model::ModelSpec;
use nereid_core::{Error, Result};

use self::params::{ExecutionProvider, StatefulParams};
use self::plan::Plan;
use crate::autocomplete::tensors;
use crate::session_options::{build_session, build_session_on};
use crate::OrtRuntime;

/// The stateful backend; one per server, sharing [`OrtRuntime`] with the ONNX backend.
pub struct StatefulBackend {
    runtime: Arc<OrtRuntime>,
}

impl StatefulBackend {
    /// The backend over `runtime`.
    pub fn new(runtime: Arc<OrtRuntime>) -> Self {
        Self { runtime }
    }
}

impl Backend for StatefulBackend {
    fn name(&self) -> &str {
        "stateful"
    }

    /// Its ONNX Runtime or llama.cpp runs on the CPU.
    fn preferred_instance_groups(&self) -> Vec<nereid_proto::inference::ModelInstanceGroup> {
        nereid_core::backend::cpu_instances_only()
    }

    fn default_model_filename(&self) -> &'static str {
        "model.onnx"
    }

    fn detected_by_file(&self) -> bool {
        false
    }

    /// `onnx_file_name`, as the original reads it, before `default_model_filename`.
    fn model_filename(&self, config: &ModelConfig) -> String {
        match config.parameters.get("onnx_file_name") {
            Some(p) if !p.string_value.trim().is_empty() => p.string_value.trim().to_string(),
            _ if !config.default_model_filename.is_empty() => config.default_model_filename.clone(),
            _ => self.default_model_filename().to_string(),
        }
    }

    /// The original completes nothing; a config without its client tensors is an error
    /// here rather than a guess (the ONNX graph also has the state and reset tensors).
    fn autocomplete(&self, config: &mut ModelConfig, _model_file: &Path) -> Result<()> {
        if config.input.is_empty() || config.output.is_empty() {
            return Err(Error::invalid_arg(format!(
                "stateful model '{}': list the model's inputs and outputs (without the state tensors) in config.pbtxt; the stateful backend does not complete configurations",
                config.name
            )));
        }
        Ok(())
    }

    fn load_model(&self, spec: Arc<ModelSpec>, model_file: &Path) -> Result<Box<dyn ModelBackend>> {
        let params = StatefulParams::parse(&spec.name, &spec.parameters)?;
        let environment = self.runtime.environment()?;
        // A CPU session to read the graph's tensors; instances build their own.
        let probe = build_session(&environment, &spec, model_file)?;
        let inputs = tensors(&spec.name, probe.inputs())?;
        let outputs = tensors(&spec.name, probe.outputs())?;
        drop(probe);
        let plan = Plan::new(&spec, params, &inputs, &outputs)?;
        tracing::info!(
            model = %spec.name,
            sequences_per_instance = plan.capacity.max_sequences,
            buffers = plan.capacity.max_buffers,
            state_bytes_per_sequence = plan.states.iter().map(|s| s.stored_bytes()).sum::<usize>(),
            "stateful model planned"
        );
        Ok(Box::new(StatefulModel {
            runtime: self.runtime.clone(),
            environment,
            spec,
            plan: Arc::new(plan),
            model_file: model_file.to_path_buf(),
        }))
    }
}

/// A loaded stateful model version.
struct StatefulModel {
    runtime: Arc<OrtRuntime>,
    environment: Arc<ort::environment::Environment>,
    spec: Arc<ModelSpec>,
    plan: Arc<Plan>,
    model_file: PathBuf,
}

impl ModelBackend for StatefulModel {
    fn create_instance(&self, instance: &InstanceConfig) -> Result<Box<dyn InstanceBackend>> {
        let providers = self.providers(instance)?;
        let session =
            build_session_on(&self.environment, &self.spec, &self.model_file, &providers)?;
        Ok(Box::new(instance::StatefulInstance::new(
            session,
            self.plan.clone(),
            &instance.name,
        )?))
    }
}

impl StatefulModel {
    /// The execution providers `ort_ep` asks for on `instance`. As in the original, a
    /// `KIND_CPU` instance runs on the CPU whatever `ort_ep` says; a GPU instance gets
    /// TensorRT by default, and a provider this ONNX Runtime lacks fails the load.
    fn providers(&self, instance: &InstanceConfig) -> Result<Vec<ExecutionProviderDispatch>> {
        let params = &self.plan.params;
        let device = match instance.kind {
            InstanceKind::Gpu(device) => device,
            InstanceKind::Cpu | InstanceKind::Model => {
                if matches!(
                    params.ort_ep,
                    Some(ExecutionProvider::Cuda | ExecutionProvider::TensorRt)
                ) {
                    tracing::warn!(model = %self.spec.name, instance = %instance.name, "ort_ep is ignored on a KIND_CPU instance, which runs on the CPU");
                }
                self.warn_trt_only();
                return Ok(Vec::new());
            }
        };
        match params.ort_ep.unwrap_or(ExecutionProvider::TensorRt) {
            ExecutionProvider::Cpu => {
                self.warn_trt_only();
                Ok(Vec::new())
            }
            ExecutionProvider::Cuda => {
                self.require::<CUDA>("cuda")?;
                self.warn_trt_only();
                Ok(vec![CUDA::default()
                    .with_device_id(device)
                    .build()
                    .error_on_failure()])
            }
            ExecutionProvider::TensorRt => {
                self.require::<TensorRT>("trt")?;
                let mut trt = TensorRT::default()
                    .with_device_id(device)
                    .with_fp16(params.fp16_compute.unwrap_or(true))
                    .with_cuda_graph(params.enable_cuda_graph);
                if let Some(dir) = &params.trt_cache_dir {
                    trt = trt
                        .with_engine_cache(true)
                        .with_engine_cache_path(dir.display());
                }
                Ok(vec![trt.build().error_on_failure()])
            }
        }
    }

    /// Fails the load when the loaded ONNX Runtime was built without provider `E`.
    fn require<E: ort::ep::ExecutionProvider>(&self, ort_ep: &str) -> Result<()> {
        match E::is_available() {
            Ok(true) => Ok(()),
            _ => Err(Error::unsupported(format!(
                "stateful model '{}': ort_ep '{ort_ep}' needs ONNX Runtime's {}, which {} does not include",
                self.spec.name,
                E::NAME,
                self.runtime.library_path().display()
            ))),
        }
    }

    /// Says when TensorRT-only settings are set but TensorRT does not run.
    fn warn_trt_only(&self) {
        let params = &self.plan.params;
        if params.fp16_compute == Some(true)
            || params.enable_cuda_graph
            || params.trt_cache_dir.is_some()
        {
            tracing::warn!(
                model = %self.spec.name,
                "compute_precision fp16, enable_cuda_graph and enable_trt_caching only take effect with ort_ep 'trt' on a GPU instance; ignored"
            );
        }
    }
}
