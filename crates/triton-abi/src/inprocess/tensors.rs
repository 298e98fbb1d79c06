//! The tensors of a `TRITONSERVER_InferenceRequest`: inputs with references to their data
//! in the caller's memory, and the requested outputs. As in Triton, the data is the
//! caller's until the request is released: it is read (copied) when the request is
//! submitted, so a program may change a buffer in place and submit the request again.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};

use nereid_core::DataType;

use super::input::{Chunk, Input};
use super::request::{text, with_request, TRITONSERVER_InferenceRequest};
use crate::buffer_attributes::TRITONSERVER_BufferAttributes;
use crate::error::{invalid_arg, unsupported, ErrorPtr};
use crate::ffi;
use crate::types::{datatype_from_raw, memory_type};

/// The input `name` of `request`, or Triton's error when the request has none.
fn input_mut<'a>(
    request: &'a mut TRITONSERVER_InferenceRequest,
    name: &str,
) -> Result<&'a mut Input, ErrorPtr> {
    let prefix = request.log_prefix();
    request
        .inputs
        .iter_mut()
        .find(|i| i.name == name)
        .ok_or_else(|| invalid_arg(format!("{prefix}input '{name}' does not exist in request")))
}

/// Adds an input, refusing a second one with the same name.
fn add_input(
    request: &mut TRITONSERVER_InferenceRequest,
    name: &str,
    declared: Option<(DataType, Vec<i64>)>,
) -> Result<(), ErrorPtr> {
    if request.inputs.iter().any(|i| i.name == name) {
        return Err(invalid_arg(format!(
            "{}input '{name}' already exists in request",
            request.log_prefix()
        )));
    }
    request.inputs.push(Input {
        name: name.to_string(),
        declared,
        chunks: Vec::new(),
    });
    Ok(())
}

/// `TRITONSERVER_InferenceRequestAddInput`: an input with its type and shape (the shape
/// includes the batch dimension for a batching model).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestAddInput(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    datatype: u32,
    shape: *const i64,
    dim_count: u64,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let name = text(name, "name")?;
        let datatype = datatype_from_raw(datatype).ok_or_else(|| {
            invalid_arg(format!("invalid datatype {datatype} for input '{name}'"))
        })?;
        let dims = usize::try_from(dim_count).map_err(|_| invalid_arg("dim_count is too large"))?;
        let shape = if dims == 0 {
            Vec::new()
        } else if shape.is_null() {
            return Err(invalid_arg("shape must not be null"));
        } else {
            // SAFETY: the caller passes `dim_count` dimensions at `shape` (non-null).
            unsafe { std::slice::from_raw_parts(shape, dims) }.to_vec()
        };
        add_input(r, name, Some((datatype, shape)))
    })
}

/// `TRITONSERVER_InferenceRequestAddRawInput`: the request's only input, whose type and
/// shape come from the model configuration.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestAddRawInput(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let name = text(name, "name")?;
        if !r.inputs.is_empty() {
            return Err(invalid_arg(format!(
                "{}raw input '{name}' can't be added to request with other inputs",
                r.log_prefix()
            )));
        }
        add_input(r, name, None)
    })
}

/// `TRITONSERVER_InferenceRequestRemoveInput`: removes an input and its data.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestRemoveInput(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let name = text(name, "name")?;
        input_mut(r, name)?;
        r.inputs.retain(|i| i.name != name);
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestRemoveAllInputs`: removes every input.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestRemoveAllInputs(
    inference_request: *mut TRITONSERVER_InferenceRequest,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.inputs.clear();
        Ok(())
    })
}

/// Where an appended chunk lives: its memory type and device id, as Triton's
/// `TRITONSERVER_MemoryType` and memory type id give them.
#[derive(Clone, Copy)]
struct Placement {
    memory_type: u32,
    memory_type_id: i64,
}

/// Appends the `byte_size` bytes at `base` to input `name`. Host memory (CPU,
/// CPU_PINNED) is read at submission; GPU memory is copied to the host at submission
/// through the CUDA driver, and refused at once where there is no CUDA.
fn append(
    request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    base: *const c_void,
    byte_size: usize,
    placement: Placement,
) -> ErrorPtr {
    with_request(request, |r| {
        let name = text(name, "name")?;
        let input = input_mut(r, name)?;
        let device = match placement.memory_type {
            memory_type::CPU | memory_type::CPU_PINNED => None,
            memory_type::GPU => {
                let device = u32::try_from(placement.memory_type_id).map_err(|_| {
                    invalid_arg(format!(
                        "input '{name}': invalid GPU id {}",
                        placement.memory_type_id
                    ))
                })?;
                nereid_shm::cuda_available().map_err(|e| {
                    unsupported(format!(
                        "input '{name}': data in GPU memory: {}",
                        e.message()
                    ))
                })?;
                Some(device)
            }
            other => {
                return Err(invalid_arg(format!(
                    "input '{name}': unknown memory type {other}"
                )))
            }
        };
        if byte_size == 0 {
            return Ok(());
        }
        if base.is_null() {
            return Err(invalid_arg("base must not be null"));
        }
        input.chunks.push(match device {
            None => Chunk::host(base.cast(), byte_size),
            Some(device) => Chunk::device(base.cast(), byte_size, device),
        });
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestAppendInputData`: appends a chunk of an input's data.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestAppendInputData(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    base: *const c_void,
    byte_size: usize,
    memory_type: u32,
    memory_type_id: i64,
) -> ErrorPtr {
    let placement = Placement {
        memory_type,
        memory_type_id,
    };
    append(inference_request, name, base, byte_size, placement)
}

/// `TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy`: as
/// `AppendInputData`; host policies do not change where Nereid reads data.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    base: *const c_void,
    byte_size: usize,
    memory_type: u32,
    memory_type_id: i64,
    host_policy_name: *const c_char,
) -> ErrorPtr {
    if let Err(e) = text(host_policy_name, "host_policy_name") {
        return e;
    }
    let placement = Placement {
        memory_type,
        memory_type_id,
    };
    append(inference_request, name, base, byte_size, placement)
}

/// `TRITONSERVER_InferenceRequestRemoveAllInputData`: drops an input's data, keeping
/// the input.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestRemoveAllInputData(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let name = text(name, "name")?;
        input_mut(r, name)?.chunks.clear();
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestAddRequestedOutput`: asks for an output (without any,
/// every output is returned).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestAddRequestedOutput(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let name = text(name, "name")?;
        if r.requested_outputs.iter().any(|o| o == name) {
            return Err(invalid_arg(format!(
                "{}output '{name}' already exists in request",
                r.log_prefix()
            )));
        }
        r.requested_outputs.push(name.to_string());
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestRemoveRequestedOutput`: no longer asks for an output
/// (no error when it was not requested, as in Triton).
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestRemoveRequestedOutput(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        let name = text(name, "name")?;
        r.requested_outputs.retain(|o| o != name);
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs`: asks for every output again.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(
    inference_request: *mut TRITONSERVER_InferenceRequest,
) -> ErrorPtr {
    with_request(inference_request, |r| {
        r.requested_outputs.clear();
        Ok(())
    })
}

/// `TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes`: appends a chunk
/// described by a buffer-attributes object — its byte size, memory type and device id
/// (Triton's Python API appends every input this way). A CUDA IPC handle in the
/// attributes is not needed: Nereid copies GPU data to the host itself, and its hosted
/// backends receive host memory.
#[no_mangle]
pub unsafe extern "C" fn TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
    inference_request: *mut TRITONSERVER_InferenceRequest,
    name: *const c_char,
    base: *const c_void,
    buffer_attributes: *mut TRITONSERVER_BufferAttributes,
) -> ErrorPtr {
    // SAFETY: a live attributes object from `TRITONSERVER_BufferAttributesNew`, or null.
    let attributes = match unsafe { ffi::reference(buffer_attributes, "buffer_attributes") } {
        Ok(attributes) => attributes,
        Err(e) => return e,
    };
    let placement = Placement {
        memory_type: attributes.memory_type,
        memory_type_id: attributes.memory_type_id,
    };
    append(
        inference_request,
        name,
        base,
        attributes.byte_size,
        placement,
    )
}
