//! `TRITONBACKEND_Response`, `TRITONBACKEND_ResponseFactory` and `TRITONBACKEND_State`:
//! how a backend answers. A response collects outputs (see [`super::output`]) and goes to
//! the request's exchange when sent; a factory creates responses and sends flags after
//! the request was released (decoupled models).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use nereid_core::model::ModelSpec;
use nereid_core::output_query::OutputQuery;
use nereid_core::request::{ParamValue, Parameters};
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::output::TRITONBACKEND_Output;
use super::request::{with_request, TRITONBACKEND_Request};
use super::single_buffer::SharedState;
use crate::buffer_attributes::TRITONSERVER_BufferAttributes;
use crate::error::{invalid_arg, peek, ErrorPtr};
use crate::ffi::{self, put};
use crate::types::memory_type;

/// `TRITONSERVER_RESPONSE_COMPLETE_FINAL`.
const COMPLETE_FINAL: u32 = 1;

/// The object behind `TRITONBACKEND_Response*`.
pub struct TRITONBACKEND_Response {
    // Boxed so the pointers handed out stay put as outputs are added.
    #[allow(clippy::vec_box)]
    outputs: Vec<Box<TRITONBACKEND_Output>>,
    /// `TRITONBACKEND_ResponseSet*Parameter`, in the order set.
    parameters: Mutex<Parameters>,
    exchange: Arc<Exchange>,
    /// The request's caller's answer to where outputs go, which may lend their buffers.
    output_query: Option<Arc<dyn OutputQuery>>,
}

impl TRITONBACKEND_Response {
    fn create(
        out: *mut *mut Self,
        exchange: &Arc<Exchange>,
        output_query: Option<Arc<dyn OutputQuery>>,
    ) -> Result<(), ErrorPtr> {
        if out.is_null() {
            return Err(invalid_arg("response must not be null"));
        }
        exchange.acquire();
        let response = Box::new(Self {
            outputs: Vec::new(),
            parameters: Mutex::new(Vec::new()),
            exchange: exchange.clone(),
            output_query,
        });
        put(out, Box::into_raw(response), "response")
    }
}

impl Drop for TRITONBACKEND_Response {
    fn drop(&mut self) {
        self.exchange.release();
    }
}

/// The object behind `TRITONBACKEND_ResponseFactory*`.
pub struct TRITONBACKEND_ResponseFactory {
    exchange: Arc<Exchange>,
    /// The request's output query, for the responses it creates.
    output_query: Option<Arc<dyn OutputQuery>>,
}

impl TRITONBACKEND_ResponseFactory {
    /// The request this factory answers.
    pub(crate) fn exchange(&self) -> &Arc<Exchange> {
        &self.exchange
    }
}

impl Drop for TRITONBACKEND_ResponseFactory {
    fn drop(&mut self) {
        self.exchange.release();
    }
}

/// The object behind `TRITONBACKEND_State*`: a sequence state tensor, which becomes an
/// output of the request's response for the sequence batcher to keep.
pub struct TRITONBACKEND_State {
    tensor: Mutex<TRITONBACKEND_Output>,
    exchange: Arc<Exchange>,
    /// For a single-buffer state: the buffer shared with the state input, which holds
    /// the state's value (the tensor above then keeps no buffer of its own).
    shared: Option<Arc<SharedState>>,
    /// The shared buffer handed out, whose attributes the backend may ask for.
    shared_attributes: Mutex<Option<Box<TRITONSERVER_BufferAttributes>>>,
}

impl TRITONBACKEND_State {
    /// Hands out the buffer shared with the state input (see `single_buffer`).
    fn allocate_shared(
        &self,
        shared: &SharedState,
        buffer: *mut *mut c_void,
        byte_size: u64,
        memory_type_out: *mut u32,
        memory_type_id: *mut i64,
    ) -> Result<(), ErrorPtr> {
        let size = usize::try_from(byte_size)
            .map_err(|_| invalid_arg(format!("buffer size {byte_size} is too large")))?;
        let memory = shared.buffer(size);
        *self.shared_attributes.lock() = Some(Box::new(TRITONSERVER_BufferAttributes {
            memory_type: memory_type::CPU,
            memory_type_id: 0,
            byte_size: memory.len(),
            cuda_ipc_handle: std::ptr::null_mut(),
        }));
        put(buffer, memory.pointer().cast(), "buffer")?;
        put(memory_type_out, memory_type::CPU, "memory_type")?;
        put(memory_type_id, 0, "memory_type_id")
    }
}

/// `TRITONBACKEND_ResponseFactoryNew`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseFactoryNew(
    factory: *mut *mut TRITONBACKEND_ResponseFactory,
    request: *mut TRITONBACKEND_Request,
) -> ErrorPtr {
    with_request(request, |r| {
        if factory.is_null() {
            return Err(invalid_arg("factory must not be null"));
        }
        r.exchange.acquire();
        let created = Box::new(TRITONBACKEND_ResponseFactory {
            exchange: r.exchange.clone(),
            output_query: r.output_query.clone(),
        });
        put(factory, Box::into_raw(created), "factory")
    })
}

/// `TRITONBACKEND_ResponseFactoryDelete`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseFactoryDelete(
    factory: *mut TRITONBACKEND_ResponseFactory,
) -> ErrorPtr {
    if !factory.is_null() {
        // SAFETY: created by `ResponseFactoryNew` and owned by the backend.
        drop(unsafe { Box::from_raw(factory) });
    }
    std::ptr::null_mut()
}

/// `TRITONBACKEND_ResponseFactorySendFlags`: a final flag without a response.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseFactorySendFlags(
    factory: *mut TRITONBACKEND_ResponseFactory,
    send_flags: u32,
) -> ErrorPtr {
    with_factory(factory, |f| {
        f.exchange.deliver(None, send_flags & COMPLETE_FINAL != 0);
        Ok(())
    })
}

/// `TRITONBACKEND_ResponseFactoryIsCancelled`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseFactoryIsCancelled(
    factory: *mut TRITONBACKEND_ResponseFactory,
    is_cancelled: *mut bool,
) -> ErrorPtr {
    with_factory(factory, |f| {
        put(is_cancelled, f.exchange.is_cancelled(), "is_cancelled")
    })
}

/// `TRITONBACKEND_ResponseNew`: a response to `request`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseNew(
    response: *mut *mut TRITONBACKEND_Response,
    request: *mut TRITONBACKEND_Request,
) -> ErrorPtr {
    with_request(request, |r| {
        TRITONBACKEND_Response::create(response, &r.exchange, r.output_query.clone())
    })
}

/// `TRITONBACKEND_ResponseNewFromFactory`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseNewFromFactory(
    response: *mut *mut TRITONBACKEND_Response,
    factory: *mut TRITONBACKEND_ResponseFactory,
) -> ErrorPtr {
    with_factory(factory, |f| {
        TRITONBACKEND_Response::create(response, &f.exchange, f.output_query.clone())
    })
}

/// `TRITONBACKEND_ResponseDelete`: drops a response that will not be sent.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseDelete(
    response: *mut TRITONBACKEND_Response,
) -> ErrorPtr {
    if !response.is_null() {
        // SAFETY: created by `ResponseNew*` and owned by the backend.
        drop(unsafe { Box::from_raw(response) });
    }
    std::ptr::null_mut()
}

/// `TRITONBACKEND_ResponseOutput`: adds an output; its buffer comes from
/// `TRITONBACKEND_OutputBuffer`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseOutput(
    response: *mut TRITONBACKEND_Response,
    output: *mut *mut TRITONBACKEND_Output,
    name: *const c_char,
    datatype: u32,
    shape: *const i64,
    dims_count: u32,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live response owned by the backend, or null (checked).
        let response = unsafe { ffi::reference_mut(response, "response") }?;
        if output.is_null() {
            return Err(invalid_arg("output must not be null"));
        }
        let created = TRITONBACKEND_Output::new(
            name,
            datatype,
            shape,
            dims_count,
            response.output_query.clone(),
        )?;
        if response.outputs.iter().any(|o| o.name == created.name) {
            return Err(invalid_arg(format!(
                "output '{}' already exists in the response",
                created.name.to_string_lossy()
            )));
        }
        response.outputs.push(Box::new(created));
        let last = response
            .outputs
            .last_mut()
            .map(|o| std::ptr::from_mut::<TRITONBACKEND_Output>(o))
            .unwrap_or(std::ptr::null_mut());
        put(output, last, "output")
    })
}

/// `TRITONBACKEND_ResponseSend`: delivers the response (or `error`, which the backend
/// keeps and deletes) and frees it; `TRITONSERVER_RESPONSE_COMPLETE_FINAL` ends the
/// request's answers.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseSend(
    response: *mut TRITONBACKEND_Response,
    send_flags: u32,
    error: ErrorPtr,
) -> ErrorPtr {
    ffi::status(|| {
        if response.is_null() {
            return Err(invalid_arg("response must not be null"));
        }
        // SAFETY: created by `ResponseNew*`; sending passes its ownership back, once.
        let mut response = unsafe { Box::from_raw(response) };
        // SAFETY: null or a live error the backend still owns.
        let result = match unsafe { peek(error) } {
            Some(e) => Err(e),
            None => response
                .outputs
                .iter()
                .try_for_each(|o| o.check_size())
                .map(|()| {
                    std::mem::take(&mut response.outputs)
                        .into_iter()
                        .map(|o| o.into_tensor())
                        .collect()
                }),
        };
        let parameters = std::mem::take(&mut *response.parameters.lock());
        response.exchange.deliver_with_parameters(
            Some(result),
            parameters,
            send_flags & COMPLETE_FINAL != 0,
        );
        Ok(())
    })
}

/// `TRITONBACKEND_ResponseSetStringParameter`: a parameter the client gets with the
/// response (the `parameters` of the HTTP JSON and of the gRPC response).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseSetStringParameter(
    response: *mut TRITONBACKEND_Response,
    name: *const c_char,
    value: *const c_char,
) -> ErrorPtr {
    // SAFETY: a NUL-terminated value or null (checked).
    let value = match unsafe { ffi::text(value, "value") } {
        Ok(value) => ParamValue::String(value.to_string()),
        Err(e) => return e,
    };
    response_parameter(response, name, value)
}

/// `TRITONBACKEND_ResponseSetIntParameter`: as the string variant.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseSetIntParameter(
    response: *mut TRITONBACKEND_Response,
    name: *const c_char,
    value: i64,
) -> ErrorPtr {
    response_parameter(response, name, ParamValue::Int(value))
}

/// `TRITONBACKEND_ResponseSetBoolParameter`: as the string variant.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseSetBoolParameter(
    response: *mut TRITONBACKEND_Response,
    name: *const c_char,
    value: bool,
) -> ErrorPtr {
    response_parameter(response, name, ParamValue::Bool(value))
}

/// `TRITONBACKEND_ResponseSetDoubleParameter`: as the string variant.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ResponseSetDoubleParameter(
    response: *mut TRITONBACKEND_Response,
    name: *const c_char,
    value: f64,
) -> ErrorPtr {
    response_parameter(response, name, ParamValue::Double(value))
}

/// Adds parameter `name` to `response`.
fn response_parameter(
    response: *mut TRITONBACKEND_Response,
    name: *const c_char,
    value: ParamValue,
) -> ErrorPtr {
    with_response(response, |r| {
        // SAFETY: a NUL-terminated name or null (checked).
        let name = unsafe { ffi::text(name, "name") }?;
        r.parameters.lock().push((name.to_string(), value));
        Ok(())
    })
}

/// The output at `index` of a response, for the two getters below.
fn output_properties(
    o: &TRITONBACKEND_Output,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dim_count: *mut u64,
) -> Result<(), ErrorPtr> {
    ffi::put_optional(name, o.name.as_ptr());
    put(datatype, o.datatype, "datatype")?;
    put(shape, o.shape.as_ptr(), "shape")?;
    put(dim_count, o.shape.len() as u64, "dim_count")
}

/// `TRITONBACKEND_InferenceResponseOutput`: an output added so far, by index.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_InferenceResponseOutput(
    response: *mut TRITONBACKEND_Response,
    index: u32,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dim_count: *mut u64,
) -> ErrorPtr {
    with_response(response, |r| {
        let o = r.outputs.get(index as usize).ok_or_else(|| {
            invalid_arg(format!(
                "out of bounds index {index}: response has {} outputs",
                r.outputs.len()
            ))
        })?;
        output_properties(o, name, datatype, shape, dim_count)
    })
}

/// `TRITONBACKEND_InferenceResponseOutputByName`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_InferenceResponseOutputByName(
    response: *mut TRITONBACKEND_Response,
    name: *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dim_count: *mut u64,
) -> ErrorPtr {
    with_response(response, |r| {
        // SAFETY: a NUL-terminated name or null (checked).
        let wanted = unsafe { ffi::text(name, "name") }?;
        let o = r
            .outputs
            .iter()
            .find(|o| o.name.as_bytes() == wanted.as_bytes())
            .ok_or_else(|| invalid_arg(format!("output name '{wanted}' not found")))?;
        output_properties(o, std::ptr::null_mut(), datatype, shape, dim_count)
    })
}

/// `TRITONBACKEND_StateNew`: a state tensor for the request's sequence.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_StateNew(
    state: *mut *mut TRITONBACKEND_State,
    request: *mut TRITONBACKEND_Request,
    name: *const c_char,
    datatype: u32,
    shape: *const i64,
    dims_count: u32,
) -> ErrorPtr {
    with_request(request, |r| {
        if state.is_null() {
            return Err(invalid_arg("state must not be null"));
        }
        let tensor = TRITONBACKEND_Output::new(name, datatype, shape, dims_count, None)?;
        let name = tensor.name.to_string_lossy().into_owned();
        check_state_name(&r.spec, &name)?;
        let shared = r.exchange.shared_state(&name).cloned();
        if let Some(shared) = &shared {
            shared.set_shape(&tensor.shape);
        }
        let created = Box::new(TRITONBACKEND_State {
            tensor: Mutex::new(tensor),
            exchange: r.exchange.clone(),
            shared,
            shared_attributes: Mutex::new(None),
        });
        put(state, Box::into_raw(created), "state")
    })
}

/// A state a backend sets must be one of the model's `sequence_batching.state` outputs,
/// refused in Triton's words otherwise.
fn check_state_name(spec: &ModelSpec, name: &str) -> Result<(), ErrorPtr> {
    let states = spec.scheduling.sequence().map(|s| &s.states);
    match states {
        Some(states) if states.iter().any(|s| s.output_name == name) => Ok(()),
        Some(states) if !states.is_empty() => Err(invalid_arg(format!(
            "state '{name}' is not a valid state name."
        ))),
        _ => Err(invalid_arg(format!(
            "unable to add state '{name}'. State configuration is missing for model '{}'.",
            spec.name
        ))),
    }
}

/// `TRITONBACKEND_StateBuffer`: the state tensor's CPU buffer.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_StateBuffer(
    state: *mut TRITONBACKEND_State,
    buffer: *mut *mut c_void,
    buffer_byte_size: u64,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> ErrorPtr {
    with_state(state, |s| match &s.shared {
        Some(shared) => s.allocate_shared(
            shared,
            buffer,
            buffer_byte_size,
            memory_type,
            memory_type_id,
        ),
        None => s
            .tensor
            .lock()
            .allocate(buffer, buffer_byte_size, memory_type, memory_type_id),
    })
}

/// `TRITONBACKEND_StateBufferAttributes`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_StateBufferAttributes(
    state: *mut TRITONBACKEND_State,
    buffer_attributes: *mut *mut TRITONSERVER_BufferAttributes,
) -> ErrorPtr {
    with_state(state, |s| {
        let attributes = match &s.shared {
            Some(_) => s
                .shared_attributes
                .lock()
                .as_deref_mut()
                .map(std::ptr::from_mut::<TRITONSERVER_BufferAttributes>)
                .ok_or_else(|| invalid_arg("the state buffer is not allocated yet"))?,
            None => s.tensor.lock().attributes()?,
        };
        put(buffer_attributes, attributes, "buffer_attributes")
    })
}

/// `TRITONBACKEND_StateUpdate`: hands the state to the sequence batcher (as an output
/// of the request, which the batcher takes out) and frees the state object.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_StateUpdate(state: *mut TRITONBACKEND_State) -> ErrorPtr {
    ffi::status(|| {
        if state.is_null() {
            return Err(invalid_arg("state must not be null"));
        }
        // SAFETY: created by `StateNew`; updating passes its ownership back, once.
        let state = unsafe { Box::from_raw(state) };
        // A single-buffer state is already in place; its value goes with the response.
        if state.shared.is_none() {
            let TRITONBACKEND_State {
                tensor, exchange, ..
            } = *state;
            exchange.add_state(tensor.into_inner().into_tensor());
        }
        Ok(())
    })
}

/// Runs `body` on the object behind `factory` (checked for null).
fn with_factory(
    factory: *mut TRITONBACKEND_ResponseFactory,
    body: impl FnOnce(&TRITONBACKEND_ResponseFactory) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: a live response factory, or null (checked).
    unsafe { ffi::with(factory, "factory", body) }
}

/// Runs `body` on the object behind `response` (checked for null).
fn with_response(
    response: *mut TRITONBACKEND_Response,
    body: impl FnOnce(&TRITONBACKEND_Response) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: a live response owned by the backend, or null (checked).
    unsafe { ffi::with(response, "response", body) }
}

/// Runs `body` on the object behind `state` (checked for null).
fn with_state(
    state: *mut TRITONBACKEND_State,
    body: impl FnOnce(&TRITONBACKEND_State) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: a live state, or null (checked).
    unsafe { ffi::with(state, "state", body) }
}
