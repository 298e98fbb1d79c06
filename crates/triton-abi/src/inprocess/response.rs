//! `TRITONSERVER_InferenceResponse`: a finished inference as C reads it: its error or its
//! outputs, each written into a buffer the caller's allocator provided and handed back
//! to the allocator when the response is deleted.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, Mutex};

use nereid_core::model::ModelSpec;
use nereid_core::request::InferResponse;
use nereid_core::Error;

use super::allocator::{ReleaseFn, TRITONSERVER_ResponseAllocator};
use super::parameter::{c_string, Value};
use crate::error::{from_core, invalid_arg, ErrorPtr};
use crate::ffi;
use crate::types::{datatype_to_raw, memory_type};

/// One output of a response, in the caller's buffer.
pub struct Output {
    pub(crate) name: CString,
    pub(crate) datatype: u32,
    pub(crate) shape: Vec<i64>,
    /// The allocator's buffer (null for a zero-byte output the allocator left empty).
    pub(crate) buffer: *mut c_void,
    pub(crate) byte_size: usize,
    pub(crate) memory_type: u32,
    pub(crate) memory_type_id: i64,
    pub(crate) buffer_userp: *mut c_void,
}

/// The allocator functions a response uses to get and give back its buffers.
#[derive(Clone, Copy)]
pub struct Allocation {
    /// The caller's allocator object, passed back to its functions.
    pub allocator: *mut TRITONSERVER_ResponseAllocator,
    /// Copied from the allocator so that its deletion cannot strand buffers.
    pub release_fn: ReleaseFn,
}

/// The object behind `TRITONSERVER_InferenceResponse*`.
pub struct TRITONSERVER_InferenceResponse {
    pub(crate) error: Option<Error>,
    pub(crate) model_name: CString,
    pub(crate) model_version: i64,
    pub(crate) id: CString,
    pub(crate) parameters: Vec<(CString, Value)>,
    pub(crate) outputs: Vec<Output>,
    /// How to release `outputs`' buffers (`None` when no allocator was given).
    pub(crate) allocation: Option<Allocation>,
    /// For classification labels.
    pub(crate) spec: Option<Arc<ModelSpec>>,
    /// Labels handed to C, kept alive (and in place) until the response is deleted.
    labels: Mutex<Vec<CString>>,
}

impl TRITONSERVER_InferenceResponse {
    /// A response carrying `error` for a request to `model_name`.
    pub fn failed(model_name: &str, model_version: i64, id: &CString, error: Error) -> Self {
        Self {
            error: Some(error),
            model_name: c_string(model_name),
            model_version,
            id: id.clone(),
            parameters: Vec::new(),
            outputs: Vec::new(),
            allocation: None,
            spec: None,
            labels: Mutex::default(),
        }
    }

    /// A successful response whose outputs still have to be written (see
    /// `super::infer`), with its parameters.
    pub fn succeeded(response: &InferResponse, spec: Arc<ModelSpec>) -> Self {
        Self {
            error: None,
            model_name: c_string(&response.model_name),
            model_version: response.model_version,
            id: c_string(&response.id),
            parameters: response
                .parameters
                .iter()
                .map(|(k, v)| (c_string(k), Value::from_core(v)))
                .collect(),
            outputs: Vec::new(),
            allocation: None,
            spec: Some(spec),
            labels: Mutex::default(),
        }
    }

    /// Records `output`, written into `buffer`, so that delete gives the buffer back.
    pub fn push_output(&mut self, output: &nereid_core::request::OutputTensor, placed: Placed) {
        self.outputs.push(Output {
            name: c_string(&output.name),
            datatype: datatype_to_raw(output.datatype),
            shape: output.shape.clone(),
            buffer: placed.buffer,
            byte_size: output.data.len(),
            memory_type: placed.memory_type,
            memory_type_id: placed.memory_type_id,
            buffer_userp: placed.buffer_userp,
        });
    }

    /// Gives every buffer back to the allocator; the first release error is returned.
    pub fn release_buffers(&mut self) -> Option<ErrorPtr> {
        let allocation = self.allocation?;
        let mut first = None;
        for output in self.outputs.drain(..) {
            if output.buffer.is_null() {
                continue;
            }
            // SAFETY: the caller's release function, given the buffer its allocator made.
            let error = unsafe {
                (allocation.release_fn)(
                    allocation.allocator,
                    output.buffer,
                    output.buffer_userp,
                    output.byte_size,
                    output.memory_type,
                    output.memory_type_id,
                )
            };
            if !error.is_null() {
                match first {
                    None => first = Some(error),
                    // SAFETY: an error the release function gave us; only the first is kept.
                    Some(_) => unsafe { crate::error::TRITONSERVER_ErrorDelete(error) },
                }
            }
        }
        first
    }
}

/// Where the allocator placed one output.
#[derive(Clone, Copy)]
pub struct Placed {
    /// The buffer (null only for zero bytes).
    pub buffer: *mut c_void,
    /// The allocator's per-buffer pointer.
    pub buffer_userp: *mut c_void,
    /// Memory type of the buffer (CPU or CPU_PINNED).
    pub memory_type: u32,
    /// Device id of the buffer.
    pub memory_type_id: i64,
}

impl Placed {
    /// No buffer, for outputs of a response whose allocation failed.
    pub const NONE: Placed = Placed {
        buffer: std::ptr::null_mut(),
        buffer_userp: std::ptr::null_mut(),
        memory_type: memory_type::CPU,
        memory_type_id: 0,
    };
}

/// Runs `body` on the response behind `response` (checked for null).
fn with_response(
    response: *mut TRITONSERVER_InferenceResponse,
    body: impl FnOnce(&TRITONSERVER_InferenceResponse) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: a live response from a response callback, or null (checked).
        let response = unsafe { ffi::reference(response, "inference_response") }?;
        body(response)
    })
}

/// Writes `value` through `out` (checked for null).
fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), ErrorPtr> {
    // SAFETY: an out-parameter from the caller, checked for null by `write`.
    unsafe { ffi::write(out, value, what) }
}

/// Triton's error for an index past the end of a response's list.
fn out_of_bounds(index: u32, len: usize, what: &str) -> ErrorPtr {
    invalid_arg(format!(
        "out of bounds index {index}: response has {len} {what}"
    ))
}

/// `TRITONSERVER_InferenceResponseDelete`: gives the output buffers back to the
/// allocator and frees the response (null is ignored).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseDelete(
    inference_response: *mut TRITONSERVER_InferenceResponse,
) -> ErrorPtr {
    if inference_response.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: created by this library and handed to the caller's response callback.
    let mut response = unsafe { Box::from_raw(inference_response) };
    response.release_buffers().unwrap_or(std::ptr::null_mut())
}

/// `TRITONSERVER_InferenceResponseError`: the response's error as a new error the caller
/// owns, or null on success.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseError(
    inference_response: *mut TRITONSERVER_InferenceResponse,
) -> ErrorPtr {
    with_response(inference_response, |r| match &r.error {
        Some(e) => Err(from_core(e)),
        None => Ok(()),
    })
}

/// `TRITONSERVER_InferenceResponseModel`: the model and version that answered.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseModel(
    inference_response: *mut TRITONSERVER_InferenceResponse,
    model_name: *mut *const c_char,
    model_version: *mut i64,
) -> ErrorPtr {
    with_response(inference_response, |r| {
        put(model_name, r.model_name.as_ptr(), "model_name")?;
        put(model_version, r.model_version, "model_version")
    })
}

/// `TRITONSERVER_InferenceResponseId`: the request's id.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseId(
    inference_response: *mut TRITONSERVER_InferenceResponse,
    request_id: *mut *const c_char,
) -> ErrorPtr {
    with_response(inference_response, |r| {
        put(request_id, r.id.as_ptr(), "request_id")
    })
}

/// `TRITONSERVER_InferenceResponseParameterCount`: the number of response parameters.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseParameterCount(
    inference_response: *mut TRITONSERVER_InferenceResponse,
    count: *mut u32,
) -> ErrorPtr {
    with_response(inference_response, |r| {
        put(count, r.parameters.len() as u32, "count")
    })
}

/// `TRITONSERVER_InferenceResponseParameter`: one response parameter: name, type and a
/// pointer to its value.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseParameter(
    inference_response: *mut TRITONSERVER_InferenceResponse,
    index: u32,
    name: *mut *const c_char,
    type_: *mut u32,
    vvalue: *mut *const c_void,
) -> ErrorPtr {
    with_response(inference_response, |r| {
        let (key, value) = r
            .parameters
            .get(index as usize)
            .ok_or_else(|| out_of_bounds(index, r.parameters.len(), "parameters"))?;
        put(name, key.as_ptr(), "name")?;
        put(type_, value.kind(), "type")?;
        put(vvalue, value.pointer(), "vvalue")
    })
}

/// `TRITONSERVER_InferenceResponseOutputCount`: the number of outputs.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseOutputCount(
    inference_response: *mut TRITONSERVER_InferenceResponse,
    count: *mut u32,
) -> ErrorPtr {
    with_response(inference_response, |r| {
        put(count, r.outputs.len() as u32, "count")
    })
}

/// Where `TRITONSERVER_InferenceResponseOutput` writes one output's description.
struct OutputOut {
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dim_count: *mut u64,
    base: *mut *const c_void,
    byte_size: *mut usize,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
    userp: *mut *mut c_void,
}

impl OutputOut {
    fn write(&self, o: &Output) -> Result<(), ErrorPtr> {
        put(self.name, o.name.as_ptr(), "name")?;
        put(self.datatype, o.datatype, "datatype")?;
        put(self.shape, o.shape.as_ptr(), "shape")?;
        put(self.dim_count, o.shape.len() as u64, "dim_count")?;
        put(self.base, o.buffer.cast_const(), "base")?;
        put(self.byte_size, o.byte_size, "byte_size")?;
        put(self.memory_type, o.memory_type, "memory_type")?;
        put(self.memory_type_id, o.memory_type_id, "memory_type_id")?;
        put(self.userp, o.buffer_userp, "userp")
    }
}

/// `TRITONSERVER_InferenceResponseOutput`: one output: name, type, shape and the buffer
/// the allocator provided, with its memory type and user pointer.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseOutput(
    inference_response: *mut TRITONSERVER_InferenceResponse,
    index: u32,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dim_count: *mut u64,
    base: *mut *const c_void,
    byte_size: *mut usize,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
    userp: *mut *mut c_void,
) -> ErrorPtr {
    let out = OutputOut {
        name,
        datatype,
        shape,
        dim_count,
        base,
        byte_size,
        memory_type,
        memory_type_id,
        userp,
    };
    with_response(inference_response, |r| {
        let output = r
            .outputs
            .get(index as usize)
            .ok_or_else(|| out_of_bounds(index, r.outputs.len(), "outputs"))?;
        out.write(output)
    })
}

/// `TRITONSERVER_InferenceResponseOutputClassificationLabel`: the label of class
/// `class_index` of an output (null when the model has no label for it).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceResponseOutputClassificationLabel(
    inference_response: *mut TRITONSERVER_InferenceResponse,
    index: u32,
    class_index: usize,
    label: *mut *const c_char,
) -> ErrorPtr {
    with_response(inference_response, |r| {
        let output = r
            .outputs
            .get(index as usize)
            .ok_or_else(|| out_of_bounds(index, r.outputs.len(), "outputs"))?;
        let name = output.name.to_string_lossy();
        let found = r
            .spec
            .as_ref()
            .and_then(|spec| spec.labels.get(&name, class_index))
            .map(|bytes| c_string(&String::from_utf8_lossy(bytes)));
        let Some(found) = found else {
            return put(label, std::ptr::null(), "label");
        };
        let pointer = found.as_ptr();
        // The CString's bytes stay in place when the vector grows.
        r.labels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(found);
        put(label, pointer, "label")
    })
}
