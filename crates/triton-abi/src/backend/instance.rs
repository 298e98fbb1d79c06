//! [`HostedInstance`], the core instance over one `TRITONBACKEND_ModelInstance`, which
//! runs a batch through `TRITONBACKEND_ModelInstanceExecute`, and the
//! `TRITONBACKEND_ModelInstance*` calls a library makes on it. A non-decoupled batch waits on its instance
//! thread until every request has its final response; a decoupled one returns as soon as
//! the backend does, its responses streaming from whatever thread sends them.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::Instant;

use nereid_core::backend::{ComputeTiming, InstanceBackend, InstanceConfig, Outcome, Streamed};
use nereid_core::batch::Batch;
use nereid_core::model::{InstanceKind, ModelSpec};
use nereid_core::request::InferRequest;
use nereid_core::response_stream::ResponseSender;
use nereid_core::sequence_flags::SequenceId;
use nereid_core::{Error, Result};
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::objects::{
    BackendHandle, ModelHandle, TRITONBACKEND_Model, TRITONBACKEND_ModelInstance,
};
use super::request::{c_text, TRITONBACKEND_Request};
use super::single_buffer::SingleBuffers;
use crate::buffer_attributes::TRITONSERVER_BufferAttributes;
use crate::error::{callee_result, invalid_arg, ErrorPtr};
use crate::ffi::{self, put};
use crate::inprocess::message::TRITONSERVER_Message;

/// `TRITONSERVER_InstanceGroupKind` values.
const KIND_CPU: u32 = 1;
const KIND_GPU: u32 = 2;
const KIND_MODEL: u32 = 3;

/// A hosted model instance, owned by its worker thread.
pub struct HostedInstance {
    instance: Box<TRITONBACKEND_ModelInstance>,
    /// The library whose entry points run this instance.
    backend: Arc<BackendHandle>,
    spec: Arc<ModelSpec>,
    /// "model 'm' (backend 'b')", for errors.
    origin: String,
    /// Buffers of the live sequences' single-buffer states.
    single_buffers: SingleBuffers,
}

// SAFETY: the instance object is used by its worker thread, and by backend threads
// through the ABI only for its atomics and locks; a backend library must accept calls
// for an instance from any thread, as under Triton.
unsafe impl Send for HostedInstance {}

impl HostedInstance {
    /// Creates the instance object and runs `TRITONBACKEND_ModelInstanceInitialize`.
    pub(crate) fn initialize(
        model: &Arc<ModelHandle>,
        spec: Arc<ModelSpec>,
        config: &InstanceConfig,
    ) -> Result<Self> {
        let (kind, device_id, policy) = match config.kind {
            InstanceKind::Cpu => (KIND_CPU, 0, "cpu".to_string()),
            InstanceKind::Gpu(id) => (KIND_GPU, id, format!("gpu_{id}")),
            InstanceKind::Model => (KIND_MODEL, 0, "model".to_string()),
        };
        let backend = model.object().backend.clone().ok_or_else(|| {
            Error::internal(format!(
                "model '{}' has no backend library to create instances with",
                spec.name
            ))
        })?;
        let origin = format!(
            "model '{}' (backend '{}')",
            spec.name,
            backend.object().name()
        );
        let instance = Box::new(TRITONBACKEND_ModelInstance {
            name: c_text(&config.name),
            kind,
            device_id,
            passive: config.passive,
            host_policy: TRITONSERVER_Message::from_value(&serde_json::json!({ policy: {} })),
            state: AtomicPtr::new(std::ptr::null_mut()),
            model: model.clone(),
            reported: Mutex::new(None),
            stats: config.stats.clone(),
        });
        let hosted = Self {
            instance,
            backend: backend.clone(),
            spec,
            origin,
            single_buffers: SingleBuffers::default(),
        };
        if let Some(initialize) = backend.object().library.instance_initialize {
            // SAFETY: the library's entry point with an instance object that lives in
            // its box until finalized.
            let error = unsafe { initialize(hosted.pointer()) };
            if let Err(e) = callee_result(error) {
                // Dropping `hosted` finalizes the instance even so, as Triton's
                // instance destructor does: backends clean up there.
                return Err(e.prefixed(&format!(
                    "failed to initialize instance '{}' of model '{}' (backend '{}'): ",
                    config.name,
                    model.object().name(),
                    backend.object().name()
                )));
            }
        }
        Ok(hosted)
    }

    fn pointer(&self) -> *mut TRITONBACKEND_ModelInstance {
        std::ptr::from_ref::<TRITONBACKEND_ModelInstance>(&self.instance).cast_mut()
    }

    /// Hands the batch to the backend, each request answering through its exchange. When
    /// execute fails the backend owns none of them: each is answered with the error here.
    fn run(&mut self, batch: &Batch<'_>, exchanges: &[Arc<Exchange>]) {
        *self.instance.reported.lock() = None;
        let mut requests: Vec<*mut TRITONBACKEND_Request> = batch
            .requests()
            .iter()
            .zip(exchanges)
            .map(|(r, e)| Box::into_raw(TRITONBACKEND_Request::new(&self.spec, r, e.clone())))
            .collect();
        let execute = self.backend.object().library.execute;
        // SAFETY: the library's entry point with its instance and requests it now owns.
        let error =
            unsafe { execute(self.pointer(), requests.as_mut_ptr(), requests.len() as u32) };
        if let Err(e) = callee_result(error) {
            let e = e.prefixed(&format!("{}: ", self.origin));
            for (request, exchange) in requests.into_iter().zip(exchanges) {
                exchange.deliver(Some(Err(e.clone())), true);
                // SAFETY: a failed execute leaves the requests with their creator.
                drop(unsafe { Box::from_raw(request) });
            }
        }
    }

    /// `exchange` of `request`, with the request's single-buffer states.
    fn with_single_buffers(&self, request: &InferRequest, exchange: Exchange) -> Arc<Exchange> {
        let shared = self.single_buffers.for_request(&self.spec, request);
        Arc::new(exchange.with_shared_states(shared))
    }

    /// Keeps the single-buffer states the execution just ended left, for the next
    /// requests of their sequences.
    fn keep_single_buffers(&mut self, batch: &Batch<'_>, exchanges: &[Arc<Exchange>]) {
        for (request, exchange) in batch.requests().iter().zip(exchanges) {
            if !exchange.shared_states().is_empty() {
                self.single_buffers
                    .keep(&self.spec, request, exchange.shared_states());
            }
        }
    }

    /// The compute phases of the last execution: as the backend reported them, else the
    /// whole call as inference.
    fn timing(&self, started: Instant, timing: &mut ComputeTiming) {
        match *self.instance.reported.lock() {
            Some([exec_start, compute_start, compute_end, exec_end]) => {
                timing.input_ns = compute_start.saturating_sub(exec_start);
                timing.infer_ns = compute_end.saturating_sub(compute_start);
                timing.output_ns = exec_end.saturating_sub(compute_end);
            }
            None => {
                timing.infer_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            }
        }
    }
}

impl InstanceBackend for HostedInstance {
    fn execute(&mut self, batch: &Batch<'_>, timing: &mut ComputeTiming) -> Vec<Outcome> {
        let started = Instant::now();
        let exchanges: Vec<Arc<Exchange>> = batch
            .requests()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let exchange = Exchange::collecting(self.origin.clone(), batch.caller(i));
                self.with_single_buffers(r, exchange)
            })
            .collect();
        self.run(batch, &exchanges);
        let outcomes = exchanges
            .iter()
            .map(|e| {
                let result = e.wait();
                if e.is_rescheduled() {
                    Outcome::Rescheduled
                } else {
                    Outcome::Answered(result, e.take_parameters())
                }
            })
            .collect();
        self.timing(started, timing);
        self.keep_single_buffers(batch, &exchanges);
        outcomes
    }

    fn execute_decoupled(
        &mut self,
        batch: &Batch<'_>,
        senders: Vec<ResponseSender>,
        timing: &mut ComputeTiming,
    ) -> Vec<Streamed> {
        let started = Instant::now();
        let exchanges: Vec<Arc<Exchange>> = senders
            .into_iter()
            .zip(batch.requests())
            .map(|(s, r)| self.with_single_buffers(r, Exchange::streaming(s, self.origin.clone())))
            .collect();
        self.run(batch, &exchanges);
        self.timing(started, timing);
        self.keep_single_buffers(batch, &exchanges);
        exchanges
            .iter()
            .map(|e| {
                // Only a rescheduled request's stream is taken: the others keep answering.
                match e.is_rescheduled().then(|| e.take_stream()).flatten() {
                    Some(stream) => Streamed::Rescheduled(stream),
                    None => Streamed::Released,
                }
            })
            .collect()
    }

    fn release_sequences(&mut self, ids: &[SequenceId]) {
        self.single_buffers.release(ids);
    }
}

impl Drop for HostedInstance {
    fn drop(&mut self) {
        let finalize = self.backend.object().library.instance_finalize;
        if let Some(finalize) = finalize {
            // SAFETY: the library's entry point, once, for an initialized instance.
            if let Err(e) = callee_result(unsafe { finalize(self.pointer()) }) {
                tracing::error!("failed finalizing instance of {}: {e}", self.origin);
            }
        }
    }
}

/// Runs `body` on the instance behind `instance` (checked for null).
fn with_instance(
    instance: *mut TRITONBACKEND_ModelInstance,
    body: impl FnOnce(&TRITONBACKEND_ModelInstance) -> std::result::Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: an instance object handed out by this module, or null (checked).
    unsafe { ffi::with(instance, "instance", body) }
}

/// `TRITONBACKEND_ModelInstanceName`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceName(
    instance: *mut TRITONBACKEND_ModelInstance,
    name: *mut *const c_char,
) -> ErrorPtr {
    with_instance(instance, |i| put(name, i.name.as_ptr(), "name"))
}

/// `TRITONBACKEND_ModelInstanceKind`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceKind(
    instance: *mut TRITONBACKEND_ModelInstance,
    kind: *mut u32,
) -> ErrorPtr {
    with_instance(instance, |i| put(kind, i.kind, "kind"))
}

/// `TRITONBACKEND_ModelInstanceDeviceId`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceDeviceId(
    instance: *mut TRITONBACKEND_ModelInstance,
    device_id: *mut i32,
) -> ErrorPtr {
    with_instance(instance, |i| put(device_id, i.device_id, "device_id"))
}

/// `TRITONBACKEND_ModelInstanceHostPolicy`: owned by the instance.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceHostPolicy(
    instance: *mut TRITONBACKEND_ModelInstance,
    host_policy: *mut *const TRITONSERVER_Message,
) -> ErrorPtr {
    with_instance(instance, |i| {
        put(host_policy, &raw const i.host_policy, "host_policy")
    })
}

/// `TRITONBACKEND_ModelInstanceIsPassive`: whether the instance is of a `passive` group
/// (created and initialized, never scheduled).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceIsPassive(
    instance: *mut TRITONBACKEND_ModelInstance,
    is_passive: *mut bool,
) -> ErrorPtr {
    with_instance(instance, |i| put(is_passive, i.passive, "is_passive"))
}

/// `TRITONBACKEND_ModelInstanceProfileCount`: no optimization profiles.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceProfileCount(
    instance: *mut TRITONBACKEND_ModelInstance,
    count: *mut u32,
) -> ErrorPtr {
    with_instance(instance, |_| put(count, 0, "count"))
}

/// `TRITONBACKEND_ModelInstanceProfileName`: every index is out of bounds.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceProfileName(
    instance: *mut TRITONBACKEND_ModelInstance,
    index: u32,
    _profile_name: *mut *const c_char,
) -> ErrorPtr {
    with_instance(instance, |_| {
        Err(invalid_arg(format!(
            "out of bounds index {index}: instance has 0 profiles"
        )))
    })
}

/// `TRITONBACKEND_ModelInstanceSecondaryDeviceCount`: none.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceSecondaryDeviceCount(
    instance: *mut TRITONBACKEND_ModelInstance,
    count: *mut u32,
) -> ErrorPtr {
    with_instance(instance, |_| put(count, 0, "count"))
}

/// `TRITONBACKEND_ModelInstanceSecondaryDeviceProperties`: every index is out of bounds.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(
    instance: *mut TRITONBACKEND_ModelInstance,
    index: u32,
    _kind: *mut *const c_char,
    _id: *mut i64,
) -> ErrorPtr {
    with_instance(instance, |_| {
        Err(invalid_arg(format!(
            "out of bounds index {index}: instance has 0 secondary devices"
        )))
    })
}

/// `TRITONBACKEND_ModelInstanceModel`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceModel(
    instance: *mut TRITONBACKEND_ModelInstance,
    model: *mut *mut TRITONBACKEND_Model,
) -> ErrorPtr {
    with_instance(instance, |i| put(model, i.model.pointer(), "model"))
}

/// `TRITONBACKEND_ModelInstanceState`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceState(
    instance: *mut TRITONBACKEND_ModelInstance,
    state: *mut *mut c_void,
) -> ErrorPtr {
    with_instance(instance, |i| {
        put(state, i.state.load(Ordering::Acquire), "state")
    })
}

/// `TRITONBACKEND_ModelInstanceSetState`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceSetState(
    instance: *mut TRITONBACKEND_ModelInstance,
    state: *mut c_void,
) -> ErrorPtr {
    with_instance(instance, |i| {
        i.state.store(state, Ordering::Release);
        Ok(())
    })
}

/// `TRITONBACKEND_ModelInstanceReportMemoryUsage`: accepted; memory usage is not
/// reported in Nereid's statistics.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceReportMemoryUsage(
    instance: *mut TRITONBACKEND_ModelInstance,
    _usage: *mut *mut TRITONSERVER_BufferAttributes,
    _usage_size: u32,
) -> ErrorPtr {
    with_instance(instance, |_| Ok(()))
}

/// `TRITONBACKEND_ModelInstanceReportStatistics`: one request's phases; used for the
/// execution's compute times when no batch statistics are reported.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceReportStatistics(
    instance: *mut TRITONBACKEND_ModelInstance,
    request: *mut TRITONBACKEND_Request,
    _success: bool,
    exec_start_ns: u64,
    compute_start_ns: u64,
    compute_end_ns: u64,
    exec_end_ns: u64,
) -> ErrorPtr {
    with_instance(instance, |i| {
        if request.is_null() {
            return Err(invalid_arg("request must not be null"));
        }
        i.reported.lock().get_or_insert([
            exec_start_ns,
            compute_start_ns,
            compute_end_ns,
            exec_end_ns,
        ]);
        Ok(())
    })
}

/// `TRITONBACKEND_ModelInstanceReportBatchStatistics`: the execution's compute phases.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceReportBatchStatistics(
    instance: *mut TRITONBACKEND_ModelInstance,
    _batch_size: u64,
    exec_start_ns: u64,
    compute_start_ns: u64,
    compute_end_ns: u64,
    exec_end_ns: u64,
) -> ErrorPtr {
    with_instance(instance, |i| {
        *i.reported.lock() = Some([exec_start_ns, compute_start_ns, compute_end_ns, exec_end_ns]);
        Ok(())
    })
}
