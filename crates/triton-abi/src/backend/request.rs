//! `TRITONBACKEND_Request` and `TRITONBACKEND_Input`: one request of a batch as a backend
//! reads it (id, correlation id, flags, parameters, inputs in the model's layout, the
//! outputs to produce), owned by the backend from execute until it releases it. Tensor
//! bytes are shared with the core request, not copied.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use nereid_core::model::ModelSpec;
use nereid_core::output_query::OutputQuery;
use nereid_core::request::{InferRequest, ParamValue};
use nereid_core::sequence_flags::{SequenceFlags, SequenceId};
use nereid_core::shm::DeviceSpan;

use super::exchange::Exchange;
use crate::buffer_attributes::TRITONSERVER_BufferAttributes;
use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi::{self, put, put_optional};
use crate::types::{datatype_to_raw, memory_type};
use nereid_core::backend::NOT_RESCHEDULABLE;

/// `TRITONSERVER_REQUEST_FLAG_SEQUENCE_START` / `_END`.
const FLAG_SEQUENCE_START: u32 = 1;
const FLAG_SEQUENCE_END: u32 = 2;
/// `TRITONSERVER_REQUEST_RELEASE_ALL` and `_RESCHEDULE`.
const RELEASE_ALL: u32 = 1;
const RELEASE_RESCHEDULE: u32 = 2;

/// Request parameters Triton consumes itself and does not show backends.
const RESERVED_PARAMETERS: [&str; 5] = [
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
];

/// The object behind `TRITONBACKEND_Input*`.
pub struct TRITONBACKEND_Input {
    name: CString,
    datatype: u32,
    shape: Vec<i64>,
    data: Bytes,
    /// The input's bytes when they stayed in a CUDA region (`data` is then empty): its
    /// GPU and device address, and the region's window, held open while the backend has
    /// the request.
    on_gpu: Option<(OnGpu, DeviceSpan)>,
    attributes: OnceLock<Box<TRITONSERVER_BufferAttributes>>,
}

/// Where an input kept on its GPU is.
#[derive(Clone, Copy)]
struct OnGpu {
    device: u32,
    address: u64,
    len: usize,
}

impl TRITONBACKEND_Input {
    /// The one buffer: its address, size, memory type and device.
    fn buffer(&self) -> (*const c_void, usize, u32, i64) {
        match self.on_gpu {
            Some((gpu, _)) => (
                gpu.address as *const c_void,
                gpu.len,
                memory_type::GPU,
                i64::from(gpu.device),
            ),
            None => (
                self.data.as_ptr().cast(),
                self.data.len(),
                memory_type::CPU,
                0,
            ),
        }
    }
}

/// A request parameter with its value where a `const void*` can point at it.
enum Parameter {
    Text(CString),
    Int(i64),
    Bool(bool),
    Double(f64),
}

/// The object behind `TRITONBACKEND_Request*`.
pub struct TRITONBACKEND_Request {
    id: CString,
    correlation: Option<SequenceId>,
    correlation_text: CString,
    flags: u32,
    timeout_us: u64,
    inputs: Vec<TRITONBACKEND_Input>,
    outputs: Vec<CString>,
    parameters: Vec<(CString, Parameter)>,
    /// Whether the backend may release it with `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`
    /// (the model runs iterative sequences).
    reschedulable: bool,
    /// The model's configuration, for the sequence states a backend may set.
    pub(crate) spec: Arc<ModelSpec>,
    pub(crate) exchange: Arc<Exchange>,
    /// Who answers `TRITONBACKEND_RequestOutputBufferProperties` (see
    /// [`super::output_query`]).
    pub(crate) output_query: Option<Arc<dyn OutputQuery>>,
}

/// A C string of `text`, without the NULs C cannot carry.
pub(crate) fn c_text(text: &str) -> CString {
    let mut bytes = text.as_bytes().to_vec();
    bytes.retain(|b| *b != 0);
    CString::new(bytes).unwrap_or_default()
}

impl TRITONBACKEND_Request {
    /// The backend's view of `request` of `spec`, answering through `exchange`. Inputs
    /// are in the model's layout (`reshape`); requested outputs are all of the model's
    /// when the request names none, as Triton normalizes them.
    pub fn new(
        spec: &Arc<ModelSpec>,
        request: &InferRequest,
        exchange: Arc<Exchange>,
    ) -> Box<Self> {
        exchange.acquire();
        let correlation = SequenceFlags::of(request, &spec.name).ok().map(|f| f.id);
        let mut flags = 0;
        if let Some(ParamValue::Bool(true)) = request.parameter("sequence_start") {
            flags |= FLAG_SEQUENCE_START;
        }
        if let Some(ParamValue::Bool(true)) = request.parameter("sequence_end") {
            flags |= FLAG_SEQUENCE_END;
        }
        let inputs = request
            .inputs
            .iter()
            .map(|i| TRITONBACKEND_Input {
                name: c_text(&i.name),
                datatype: datatype_to_raw(i.datatype),
                shape: spec.input_model_shape(&i.name, &i.shape),
                // A single-buffer state is read from the buffer the backend writes.
                data: exchange
                    .shared_input(&i.name)
                    .map_or_else(|| i.data.clone(), |s| s.input_view()),
                on_gpu: i.device.as_ref().and_then(|span| {
                    let (device, address) = span.location()?;
                    let gpu = OnGpu {
                        device,
                        address,
                        len: span.len(),
                    };
                    Some((gpu, span.clone()))
                }),
                attributes: OnceLock::new(),
            })
            .collect();
        let outputs = match &request.requested_outputs {
            Some(names) if !names.is_empty() => names.iter().map(|n| c_text(n)).collect(),
            _ => spec.outputs.iter().map(|o| c_text(&o.name)).collect(),
        };
        let parameters = request
            .parameters
            .iter()
            .filter(|(k, _)| !RESERVED_PARAMETERS.contains(&k.as_str()))
            .map(|(k, v)| {
                let value = match v {
                    ParamValue::Bool(b) => Parameter::Bool(*b),
                    ParamValue::Int(n) => Parameter::Int(*n),
                    ParamValue::Uint(n) => Parameter::Int(i64::try_from(*n).unwrap_or(i64::MAX)),
                    ParamValue::Double(d) => Parameter::Double(*d),
                    ParamValue::String(s) => Parameter::Text(c_text(s)),
                };
                (c_text(k), value)
            })
            .collect();
        let correlation_text = match &correlation {
            Some(SequenceId::Text(s)) => c_text(s),
            _ => CString::default(),
        };
        Box::new(Self {
            id: c_text(&request.id),
            correlation,
            correlation_text,
            flags,
            timeout_us: request.u64_parameter("timeout").unwrap_or(0),
            inputs,
            outputs,
            parameters,
            reschedulable: spec.scheduling.sequence().is_some_and(|s| s.iterative),
            spec: spec.clone(),
            exchange,
            output_query: request.output_query.clone(),
        })
    }

    /// Triton's prefix for a message about this request: `[request id: <id>] `, with
    /// `<id_unknown>` for a request without one.
    pub(crate) fn log_prefix(&self) -> String {
        let id = self.id.to_string_lossy();
        let id = if id.is_empty() {
            "<id_unknown>".into()
        } else {
            id
        };
        format!("[request id: {id}] ")
    }
}

impl Drop for TRITONBACKEND_Request {
    fn drop(&mut self) {
        self.exchange.release();
    }
}

/// Runs `body` on the request behind `request` (checked for null).
pub(crate) fn with_request(
    request: *mut TRITONBACKEND_Request,
    body: impl FnOnce(&TRITONBACKEND_Request) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: a request handed to the backend by execute and not yet released, or null.
    unsafe { ffi::with(request, "request", body) }
}

/// Runs `body` on the input behind `input` (checked for null).
fn with_input(
    input: *mut TRITONBACKEND_Input,
    body: impl FnOnce(&TRITONBACKEND_Input) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: an input of a live request, or null (checked).
    unsafe { ffi::with(input, "input", body) }
}

fn index_error(what: &str, index: u32, count: usize) -> ErrorPtr {
    invalid_arg(format!(
        "out of bounds index {index}: request has {count} {what}"
    ))
}

/// `TRITONBACKEND_RequestId`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestId(
    request: *mut TRITONBACKEND_Request,
    id: *mut *const c_char,
) -> ErrorPtr {
    with_request(request, |r| put(id, r.id.as_ptr(), "id"))
}

/// `TRITONBACKEND_RequestCorrelationId`: 0 when the request has none; an error when it
/// is a string.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestCorrelationId(
    request: *mut TRITONBACKEND_Request,
    id: *mut u64,
) -> ErrorPtr {
    with_request(request, |r| match &r.correlation {
        Some(SequenceId::Text(_)) => Err(invalid_arg(
            "correlation ID in request is not an unsigned int",
        )),
        Some(SequenceId::Number(n)) => put(id, *n, "id"),
        None => put(id, 0, "id"),
    })
}

/// `TRITONBACKEND_RequestCorrelationIdString`: an error when the id is a number.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestCorrelationIdString(
    request: *mut TRITONBACKEND_Request,
    id: *mut *const c_char,
) -> ErrorPtr {
    with_request(request, |r| match &r.correlation {
        Some(SequenceId::Text(_)) => put(id, r.correlation_text.as_ptr(), "id"),
        _ => Err(invalid_arg("correlation ID in request is not a string")),
    })
}

/// `TRITONBACKEND_RequestFlags`: the sequence START/END flags.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestFlags(
    request: *mut TRITONBACKEND_Request,
    flags: *mut u32,
) -> ErrorPtr {
    with_request(request, |r| put(flags, r.flags, "flags"))
}

/// `TRITONBACKEND_RequestIsCancelled`: whether the caller went away (its stream closed, its
/// connection closed or its call cancelled or past its deadline).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestIsCancelled(
    request: *mut TRITONBACKEND_Request,
    is_cancelled: *mut bool,
) -> ErrorPtr {
    with_request(request, |r| {
        put(is_cancelled, r.exchange.is_cancelled(), "is_cancelled")
    })
}

/// `TRITONBACKEND_InferenceRequestTimeoutMicroseconds`: 0 when none was given.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_InferenceRequestTimeoutMicroseconds(
    request: *mut TRITONBACKEND_Request,
    timeout: *mut u64,
) -> ErrorPtr {
    with_request(request, |r| put(timeout, r.timeout_us, "timeout"))
}

/// `TRITONBACKEND_RequestParameterCount`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestParameterCount(
    request: *mut TRITONBACKEND_Request,
    count: *mut u32,
) -> ErrorPtr {
    with_request(request, |r| put(count, r.parameters.len() as u32, "count"))
}

/// `TRITONBACKEND_RequestParameter`: key, `TRITONSERVER_ParameterType` and a pointer to
/// the value (a C string, an int64, a bool or a double), owned by the request.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestParameter(
    request: *mut TRITONBACKEND_Request,
    index: u32,
    key: *mut *const c_char,
    kind: *mut u32,
    vvalue: *mut *const c_void,
) -> ErrorPtr {
    with_request(request, |r| {
        let (name, value) = r
            .parameters
            .get(index as usize)
            .ok_or_else(|| index_error("parameters", index, r.parameters.len()))?;
        let (code, pointer): (u32, *const c_void) = match value {
            Parameter::Text(s) => (0, s.as_ptr().cast()),
            Parameter::Int(n) => (1, std::ptr::from_ref(n).cast()),
            Parameter::Bool(b) => (2, std::ptr::from_ref(b).cast()),
            Parameter::Double(d) => (3, std::ptr::from_ref(d).cast()),
        };
        put(key, name.as_ptr(), "key")?;
        put(kind, code, "type")?;
        put(vvalue, pointer, "vvalue")
    })
}

/// `TRITONBACKEND_RequestInputCount`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestInputCount(
    request: *mut TRITONBACKEND_Request,
    count: *mut u32,
) -> ErrorPtr {
    with_request(request, |r| put(count, r.inputs.len() as u32, "count"))
}

/// `TRITONBACKEND_RequestInputName`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestInputName(
    request: *mut TRITONBACKEND_Request,
    index: u32,
    input_name: *mut *const c_char,
) -> ErrorPtr {
    with_request(request, |r| {
        let input = r
            .inputs
            .get(index as usize)
            .ok_or_else(|| index_error("inputs", index, r.inputs.len()))?;
        put(input_name, input.name.as_ptr(), "input_name")
    })
}

/// `TRITONBACKEND_RequestInput`: the input called `name`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestInput(
    request: *mut TRITONBACKEND_Request,
    name: *const c_char,
    input: *mut *mut TRITONBACKEND_Input,
) -> ErrorPtr {
    with_request(request, |r| {
        // SAFETY: a NUL-terminated name or null (checked).
        let name = unsafe { ffi::text(name, "name") }?;
        let found = r
            .inputs
            .iter()
            .find(|i| i.name.as_bytes() == name.as_bytes())
            .ok_or_else(|| invalid_arg(format!("unknown request input name {name}")))?;
        put(input, std::ptr::from_ref(found).cast_mut(), "input")
    })
}

/// `TRITONBACKEND_RequestInputByIndex`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestInputByIndex(
    request: *mut TRITONBACKEND_Request,
    index: u32,
    input: *mut *mut TRITONBACKEND_Input,
) -> ErrorPtr {
    with_request(request, |r| {
        let found = r
            .inputs
            .get(index as usize)
            .ok_or_else(|| index_error("inputs", index, r.inputs.len()))?;
        put(input, std::ptr::from_ref(found).cast_mut(), "input")
    })
}

/// `TRITONBACKEND_RequestOutputCount`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestOutputCount(
    request: *mut TRITONBACKEND_Request,
    count: *mut u32,
) -> ErrorPtr {
    with_request(request, |r| put(count, r.outputs.len() as u32, "count"))
}

/// `TRITONBACKEND_RequestOutputName`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestOutputName(
    request: *mut TRITONBACKEND_Request,
    index: u32,
    output_name: *mut *const c_char,
) -> ErrorPtr {
    with_request(request, |r| {
        let name = r
            .outputs
            .get(index as usize)
            .ok_or_else(|| index_error("requested outputs", index, r.outputs.len()))?;
        put(output_name, name.as_ptr(), "output_name")
    })
}

/// `TRITONBACKEND_RequestTrace`: no trace, which backends treat as tracing being off:
/// traces stay with the core (its trace files and spans, or an in-process caller's
/// `TRITONSERVER_InferenceTrace`), so a backend's own requests (BLS) are not traced as
/// children.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestTrace(
    request: *mut TRITONBACKEND_Request,
    trace: *mut *mut c_void,
) -> ErrorPtr {
    with_request(request, |_| put(trace, std::ptr::null_mut(), "trace"))
}

/// `TRITONBACKEND_RequestRelease`: the backend is done with the request (ALL), or wants
/// it executed again (RESCHEDULE, for a model with iterative sequences). The request may
/// still be answered through its factories and responses. On an error the backend keeps
/// the request, as in Triton.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_RequestRelease(
    request: *mut TRITONBACKEND_Request,
    release_flags: u32,
) -> ErrorPtr {
    ffi::status(|| {
        if request.is_null() {
            return Err(invalid_arg("request must not be null"));
        }
        // SAFETY: a request handed out by execute and not yet released (checked for null).
        let r = unsafe { &*request };
        if release_flags & RELEASE_RESCHEDULE != 0 {
            if !r.reschedulable {
                let refused = invalid_arg(NOT_RESCHEDULABLE);
                // Triton stops there and its client waits forever: the backend keeps a
                // request it will not answer. Here the request fails instead.
                let failed = nereid_core::Error::invalid_arg(NOT_RESCHEDULABLE);
                r.exchange.deliver(Some(Err(failed)), true);
                return Err(refused);
            }
            r.exchange.reschedule();
        } else if release_flags & RELEASE_ALL == 0 {
            return Err(invalid_arg(format!(
                "unknown request release flags {release_flags}"
            )));
        }
        // SAFETY: a request handed out by execute; releasing passes it back, once.
        drop(unsafe { Box::from_raw(request) });
        Ok(())
    })
}

/// The properties every input getter returns.
fn input_properties(
    i: &TRITONBACKEND_Input,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dims_count: *mut u32,
    byte_size: *mut u64,
    buffer_count: *mut u32,
) {
    put_optional(name, i.name.as_ptr());
    put_optional(datatype, i.datatype);
    put_optional(shape, i.shape.as_ptr());
    put_optional(dims_count, i.shape.len() as u32);
    put_optional(byte_size, i.buffer().1 as u64);
    put_optional(buffer_count, 1);
}

/// `TRITONBACKEND_InputProperties`: any out-parameter may be null.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_InputProperties(
    input: *mut TRITONBACKEND_Input,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dims_count: *mut u32,
    byte_size: *mut u64,
    buffer_count: *mut u32,
) -> ErrorPtr {
    with_input(input, |i| {
        input_properties(
            i,
            name,
            datatype,
            shape,
            dims_count,
            byte_size,
            buffer_count,
        );
        Ok(())
    })
}

/// `TRITONBACKEND_InputPropertiesForHostPolicy`: as `InputProperties` (one host policy).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_InputPropertiesForHostPolicy(
    input: *mut TRITONBACKEND_Input,
    _host_policy_name: *const c_char,
    name: *mut *const c_char,
    datatype: *mut u32,
    shape: *mut *const i64,
    dims_count: *mut u32,
    byte_size: *mut u64,
    buffer_count: *mut u32,
) -> ErrorPtr {
    with_input(input, |i| {
        input_properties(
            i,
            name,
            datatype,
            shape,
            dims_count,
            byte_size,
            buffer_count,
        );
        Ok(())
    })
}

/// The one buffer of an input, where it is: host memory, or the GPU memory of the CUDA
/// region it came in (for a model that reads inputs there), whatever memory type was
/// preferred, as in Triton.
fn input_buffer(
    i: &TRITONBACKEND_Input,
    index: u32,
    buffer: *mut *const c_void,
    buffer_byte_size: *mut u64,
    memory_type_out: *mut u32,
    memory_type_id: *mut i64,
) -> Result<(), ErrorPtr> {
    if index != 0 {
        return Err(index_error("buffers", index, 1));
    }
    let (address, len, kind, device) = i.buffer();
    put(buffer, address, "buffer")?;
    put(buffer_byte_size, len as u64, "buffer_byte_size")?;
    put(memory_type_out, kind, "memory_type")?;
    put(memory_type_id, device, "memory_type_id")
}

/// `TRITONBACKEND_InputBuffer`: the input's one buffer, where it is.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_InputBuffer(
    input: *mut TRITONBACKEND_Input,
    index: u32,
    buffer: *mut *const c_void,
    buffer_byte_size: *mut u64,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> ErrorPtr {
    with_input(input, |i| {
        input_buffer(
            i,
            index,
            buffer,
            buffer_byte_size,
            memory_type,
            memory_type_id,
        )
    })
}

/// `TRITONBACKEND_InputBufferForHostPolicy`: as `InputBuffer` (one host policy).
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_InputBufferForHostPolicy(
    input: *mut TRITONBACKEND_Input,
    _host_policy_name: *const c_char,
    index: u32,
    buffer: *mut *const c_void,
    buffer_byte_size: *mut u64,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> ErrorPtr {
    with_input(input, |i| {
        input_buffer(
            i,
            index,
            buffer,
            buffer_byte_size,
            memory_type,
            memory_type_id,
        )
    })
}

/// `TRITONBACKEND_InputBufferAttributes`: the buffer and its attributes, owned by the
/// input.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_InputBufferAttributes(
    input: *mut TRITONBACKEND_Input,
    index: u32,
    buffer: *mut *const c_void,
    buffer_attributes: *mut *mut TRITONSERVER_BufferAttributes,
) -> ErrorPtr {
    with_input(input, |i| {
        if index != 0 {
            return Err(index_error("buffers", index, 1));
        }
        let (address, len, kind, device) = i.buffer();
        let attributes = i.attributes.get_or_init(|| {
            Box::new(TRITONSERVER_BufferAttributes {
                memory_type: kind,
                memory_type_id: device,
                byte_size: len,
                cuda_ipc_handle: std::ptr::null_mut(),
            })
        });
        put(buffer, address, "buffer")?;
        put(
            buffer_attributes,
            std::ptr::from_ref::<TRITONSERVER_BufferAttributes>(attributes).cast_mut(),
            "buffer_attributes",
        )
    })
}
