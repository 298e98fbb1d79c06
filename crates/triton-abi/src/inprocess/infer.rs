//! `TRITONSERVER_ServerInferAsync`: hands a request (and the caller's trace, see
//! [`super::trace`]) to the core facade and, when the answer comes, writes the outputs through the caller's allocator, calls the response
//! callback (COMPLETE_FINAL) and then the release callback (RELEASE_ALL), in Triton's
//! order: a backend sends its response before it releases the request.
#![allow(unsafe_code)]

use std::ffi::{c_void, CString};
use std::sync::Arc;

use nereid_core::model::ModelSpec;
use nereid_core::request::{InferRequest, InferResponse, OutputTensor, ParamValue};
use nereid_core::validate::validate_request;
use nereid_core::{Error, ErrorKind};

use super::allocator::{CallerQuery, TRITONSERVER_ResponseAllocator};
use super::request::{
    Cancel, Correlation, ReleaseFn, ResponseTarget, TRITONSERVER_InferenceRequest,
    FLAG_SEQUENCE_END, FLAG_SEQUENCE_START,
};
use super::response::{Allocation, Placed, TRITONSERVER_InferenceResponse};
use super::server::TRITONSERVER_Server;
use super::trace::{Forwarder, TRITONSERVER_InferenceTrace};
use crate::error::{from_core, internal, invalid_arg, take, unsupported, ErrorPtr};
use crate::ffi;
use crate::types::memory_type;

/// `TRITONSERVER_RESPONSE_COMPLETE_FINAL`
const RESPONSE_COMPLETE_FINAL: u32 = 1;
/// `TRITONSERVER_REQUEST_RELEASE_ALL`
const REQUEST_RELEASE_ALL: u32 = 1;

/// `TRITONSERVER_ServerInferAsync`: submits the request. Errors found before the model
/// runs (unknown model, invalid inputs) are returned here and the caller keeps the
/// request; afterwards every outcome arrives through the response callback.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_ServerInferAsync(
    server: *mut TRITONSERVER_Server,
    inference_request: *mut TRITONSERVER_InferenceRequest,
    trace: *mut TRITONSERVER_InferenceTrace,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live server, or null (checked).
        let server = unsafe { ffi::reference(server, "server") }?;
        // SAFETY: a live request owned by the caller, or null (checked).
        let request = unsafe { ffi::reference_mut(inference_request, "inference_request") }?;
        let target = request.response.ok_or_else(|| {
            invalid_arg(format!(
                "{}inference request has no response callback (TRITONSERVER_InferenceRequestSetResponseCallback)",
                request.log_prefix()
            ))
        })?;
        let facade = server.engine.server();
        let spec = facade
            .model_spec(&request.model_name, request.model_version)
            .map_err(|e| from_core(&e))?;
        let mut core = core_request(request, &spec).map_err(|e| from_core(&e))?;
        validate_request(&spec, &core).map_err(|e| from_core(&e))?;
        // The caller's trace becomes the server's once the submission succeeds (`arm`);
        // until then a failure leaves it with the caller.
        let forwarder = (!trace.is_null()).then(|| {
            // SAFETY: a live trace from TRITONSERVER_InferenceTrace(Tensor)New, which
            // the caller hands over with the request.
            let (forwarder, core_trace) = unsafe { Forwarder::start(trace) };
            core.trace = Some(core_trace);
            forwarder
        });
        let handed_over = || {
            if let Some(forwarder) = &forwarder {
                forwarder.arm();
            }
        };
        let delivery = Delivery {
            request: inference_request,
            release: request.release,
            target,
            id: request.id.clone(),
            spec,
        };
        let cancel = Arc::new(Cancel::default());
        request.cancel = Some(cancel.clone());
        let engine = server.engine.handle();
        if delivery.spec.decoupled {
            let answers = server
                .engine
                .submit_stream(core)
                .map_err(|e| from_core(&e))?;
            handed_over();
            server
                .engine
                .spawn(stream_answers(answers, delivery, cancel, engine));
            return Ok(());
        }
        let answer = server.engine.submit(core);
        handed_over();
        server.engine.spawn(async move {
            let result = tokio::select! {
                result = answer => result,
                () = cancel.cancelled() => Err(Error::new(
                    ErrorKind::Cancelled,
                    "inference request cancelled",
                )),
            };
            // The caller's functions may block: run them off the runtime's workers.
            let _ = engine
                .spawn_blocking(move || delivery.deliver(result))
                .await;
        });
        Ok(())
    })
}

/// Delivers a decoupled model's answers as they come: each through the response
/// callback (flags 0, or COMPLETE_FINAL on the last; a final flag alone comes with a
/// null response, as in Triton), then the release callback.
async fn stream_answers(
    mut answers: nereid_core::response_stream::ResponseStream,
    delivery: Delivery,
    cancel: Arc<Cancel>,
    engine: tokio::runtime::Handle,
) {
    let delivery = Arc::new(delivery);
    loop {
        let next = tokio::select! {
            next = answers.recv() => next,
            () = cancel.cancelled() => Some(nereid_core::response_stream::StreamedResponse {
                result: Some(Err(Error::new(ErrorKind::Cancelled, "inference request cancelled"))),
                last: true,
            }),
        };
        let (result, last) = match next {
            Some(answer) => (answer.result, answer.last),
            // The stream ended without a final message: close it for the caller.
            None => (None, true),
        };
        let sending = delivery.clone();
        // The caller's functions may block: run them off the runtime's workers.
        let _ = engine
            .spawn_blocking(move || sending.respond(result, last))
            .await;
        if last {
            break;
        }
    }
    delivery.release();
}

/// The core request for `request`: its tensors, id, parameters and the sequence,
/// priority and timeout fields as the parameters the core reads.
fn core_request(
    request: &TRITONSERVER_InferenceRequest,
    spec: &ModelSpec,
) -> nereid_core::Result<InferRequest> {
    let mut parameters = Vec::new();
    match &request.correlation {
        Correlation::Number(0) => {}
        Correlation::Number(n) => parameters.push(("sequence_id".into(), ParamValue::Uint(*n))),
        Correlation::Text(s) if s.is_empty() => {}
        Correlation::Text(s) => parameters.push((
            "sequence_id".into(),
            ParamValue::String(s.to_string_lossy().into_owned()),
        )),
    }
    if request.flags & FLAG_SEQUENCE_START != 0 {
        parameters.push(("sequence_start".into(), ParamValue::Bool(true)));
    }
    if request.flags & FLAG_SEQUENCE_END != 0 {
        parameters.push(("sequence_end".into(), ParamValue::Bool(true)));
    }
    if request.priority != 0 {
        parameters.push(("priority".into(), ParamValue::Uint(request.priority)));
    }
    if request.timeout_us != 0 {
        parameters.push(("timeout".into(), ParamValue::Uint(request.timeout_us)));
    }
    parameters.extend(request.parameters.iter().cloned());
    let inputs = request
        .inputs
        .iter()
        // SAFETY: input buffers stay valid until the request is released (Triton's
        // contract), and submission happens before that.
        .map(|i| unsafe { i.to_core(spec) })
        .collect::<nereid_core::Result<_>>()?;
    Ok(InferRequest {
        model_name: request.model_name.clone(),
        model_version: request.model_version,
        id: request.id.to_string_lossy().into_owned(),
        parameters,
        inputs,
        requested_outputs: (!request.requested_outputs.is_empty())
            .then(|| request.requested_outputs.clone()),
        classification: Vec::new(),
        trace: None,
        output_query: request
            .response
            .as_ref()
            .and_then(|target| CallerQuery::of(target.allocator, target.allocator_userp)),
    })
}

/// Everything needed to answer one submitted request.
struct Delivery {
    /// Passed back to the release callback; never read here after submission.
    request: *mut TRITONSERVER_InferenceRequest,
    release: Option<(ReleaseFn, *mut c_void)>,
    target: ResponseTarget,
    id: CString,
    spec: Arc<ModelSpec>,
}

// SAFETY: the pointers are the C caller's handles and user pointers; Triton's API calls
// allocators and callbacks from its own threads, so callers must accept any thread.
unsafe impl Send for Delivery {}
// SAFETY: as for Send; a decoupled request's responses are delivered one at a time.
unsafe impl Sync for Delivery {}

impl Delivery {
    /// Builds the response, calls the response callback, then releases the request.
    fn deliver(self, result: nereid_core::Result<InferResponse>) {
        self.respond(Some(result), true);
        self.release();
    }

    /// Calls the response callback with the response for `result` (null for a final
    /// flag alone), marked COMPLETE_FINAL when `last`.
    fn respond(&self, result: Option<nereid_core::Result<InferResponse>>, last: bool) {
        let response = match result {
            None => std::ptr::null_mut(),
            Some(Ok(answer)) => Box::into_raw(Box::new(self.place(&answer))),
            Some(Err(e)) => Box::into_raw(Box::new(TRITONSERVER_InferenceResponse::failed(
                &self.spec.name,
                self.spec.version,
                &self.id,
                e,
            ))),
        };
        let flags = if last { RESPONSE_COMPLETE_FINAL } else { 0 };
        // SAFETY: the caller's response function; it now owns the response.
        unsafe { (self.target.complete)(response, flags, self.target.userp) };
    }

    /// Gives the request back through the release callback.
    fn release(&self) {
        if let Some((release, userp)) = self.release {
            // SAFETY: the caller's release function, given back its own request.
            unsafe { release(self.request, REQUEST_RELEASE_ALL, userp) };
        }
    }

    /// The response for a successful answer, with each output written into a buffer from
    /// the caller's allocator; an allocation failure becomes the response's error.
    fn place(&self, answer: &InferResponse) -> TRITONSERVER_InferenceResponse {
        let mut response = TRITONSERVER_InferenceResponse::succeeded(answer, self.spec.clone());
        if answer.outputs.is_empty() {
            return response;
        }
        // SAFETY: the caller's allocator stays alive while its requests are in flight.
        let Some(allocator) = (unsafe { self.target.allocator.as_ref() }) else {
            response.error = Some(Error::internal(
                "inference request has outputs but no response allocator",
            ));
            return response;
        };
        response.allocation = Some(Allocation {
            allocator: self.target.allocator,
            release_fn: allocator.release_fn,
        });
        if let Err(e) = self.allocate_all(allocator, answer, &mut response) {
            if let Some(release_error) = response.release_buffers() {
                // SAFETY: an error the release function returned; the first error wins.
                unsafe { crate::error::TRITONSERVER_ErrorDelete(release_error) };
            }
            // SAFETY: `e` is an error we own (from the allocator or created here).
            response.error = unsafe { take(e) };
        }
        response
    }

    fn allocate_all(
        &self,
        allocator: &TRITONSERVER_ResponseAllocator,
        answer: &InferResponse,
        response: &mut TRITONSERVER_InferenceResponse,
    ) -> Result<(), ErrorPtr> {
        if let Some(start) = allocator.start_fn {
            // SAFETY: the caller's start function with its allocator and user pointer.
            let error = unsafe { start(self.target.allocator, self.target.allocator_userp) };
            if !error.is_null() {
                return Err(error);
            }
        }
        for output in &answer.outputs {
            let placed = self.allocate(allocator, output)?;
            response.push_output(output, placed);
        }
        Ok(())
    }

    /// Asks the allocator for a CPU buffer for `output` and copies the output into it
    /// (through the CUDA driver when the allocator answers with GPU memory).
    fn allocate(
        &self,
        allocator: &TRITONSERVER_ResponseAllocator,
        output: &OutputTensor,
    ) -> Result<Placed, ErrorPtr> {
        let name = super::parameter::c_string(&output.name);
        let size = output.data.len();
        let mut placed = Placed::NONE;
        // SAFETY: the caller's alloc function, with valid out-parameters.
        let error = unsafe {
            (allocator.alloc_fn)(
                self.target.allocator,
                name.as_ptr(),
                size,
                memory_type::CPU,
                0,
                self.target.allocator_userp,
                &mut placed.buffer,
                &mut placed.buffer_userp,
                &mut placed.memory_type,
                &mut placed.memory_type_id,
            )
        };
        if !error.is_null() {
            return Err(error);
        }
        if size == 0 {
            return Ok(placed);
        }
        if placed.buffer.is_null() {
            return Err(internal(format!(
                "failed to allocate {size} bytes for output '{}'",
                output.name
            )));
        }
        if placed.memory_type == memory_type::GPU {
            let copied = u32::try_from(placed.memory_type_id)
                .map_err(|_| format!("invalid GPU id {}", placed.memory_type_id))
                .and_then(|device| {
                    // SAFETY: the allocator gave `size` bytes of device memory on `device`
                    // at `buffer`, for this output alone.
                    unsafe {
                        nereid_shm::copy_host_to_device(device, placed.buffer as u64, &output.data)
                    }
                    .map_err(|e| e.message().to_string())
                });
            let Err(why) = copied else {
                return Ok(placed);
            };
            // SAFETY: gives the unusable buffer straight back to its allocator.
            let error = unsafe {
                (allocator.release_fn)(
                    self.target.allocator,
                    placed.buffer,
                    placed.buffer_userp,
                    size,
                    placed.memory_type,
                    placed.memory_type_id,
                )
            };
            if !error.is_null() {
                // SAFETY: an error the release function returned; the GPU error wins.
                unsafe { crate::error::TRITONSERVER_ErrorDelete(error) };
            }
            return Err(unsupported(format!(
                "output '{}': the allocator returned GPU memory, which could not be written: {why}",
                output.name
            )));
        }
        // SAFETY: the allocator gave `size` writable bytes of host memory at `buffer`.
        unsafe {
            std::ptr::copy_nonoverlapping(output.data.as_ptr(), placed.buffer.cast::<u8>(), size)
        };
        Ok(placed)
    }
}
