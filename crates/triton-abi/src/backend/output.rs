//! `TRITONBACKEND_Output`: one output of a response (or a sequence state's tensor) and the
//! buffer the backend writes it into. The buffer is Nereid's host memory, or, as Triton's
//! frontends hand a backend the output's shared-memory region, the window of the client's
//! region the output goes to: the backend then writes the output where the client reads
//! it, and the frontend copies nothing (see `nereid_core::output_query`).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use bytes::Bytes;
use nereid_core::output_query::{MemoryKind, OutputQuery, Placement};
use nereid_core::request::OutputTensor;
use nereid_core::shm::OutputTarget;

use super::request::c_text;
use crate::buffer_attributes::TRITONSERVER_BufferAttributes;
use crate::error::{invalid_arg, ErrorPtr};
use crate::ffi::{self, put};
use crate::types::{datatype_from_raw, memory_kind_of, memory_type_of};

/// The object behind `TRITONBACKEND_Output*` (and a state's tensor).
pub struct TRITONBACKEND_Output {
    pub(crate) name: CString,
    pub(crate) datatype: u32,
    pub(crate) shape: Vec<i64>,
    buffer: Option<Buffer>,
    attributes: Option<Box<TRITONSERVER_BufferAttributes>>,
    /// Who may lend the output's buffer: the request's caller (see [`Buffer::Lent`]).
    lender: Option<Arc<dyn OutputQuery>>,
}

/// Where the backend writes an output.
enum Buffer {
    /// Host memory of Nereid's, zeroed.
    Own(Vec<u8>),
    /// `len` bytes at the start of the window of the client's region the output goes to.
    Lent {
        target: OutputTarget,
        len: usize,
        placement: Placement,
    },
}

impl Buffer {
    fn len(&self) -> usize {
        match self {
            Self::Own(data) => data.len(),
            Self::Lent { len, .. } => *len,
        }
    }

    fn placement(&self) -> Placement {
        match self {
            Self::Own(_) => Placement::CPU,
            Self::Lent { placement, .. } => *placement,
        }
    }
}

impl TRITONBACKEND_Output {
    /// An output (or state) `name` of a response; `lender` is the request's query, which
    /// may lend the output's buffer ([`Self::allocate`]).
    pub(crate) fn new(
        name: *const c_char,
        datatype: u32,
        shape: *const i64,
        dims: u32,
        lender: Option<Arc<dyn OutputQuery>>,
    ) -> Result<Self, ErrorPtr> {
        // SAFETY: a NUL-terminated name or null (checked).
        let name = unsafe { ffi::text(name, "name") }?;
        datatype_from_raw(datatype).ok_or_else(|| {
            invalid_arg(format!(
                "output '{name}' has an invalid data type {datatype}"
            ))
        })?;
        let shape = if dims == 0 {
            Vec::new()
        } else if shape.is_null() {
            return Err(invalid_arg("shape must not be null"));
        } else {
            // SAFETY: the caller passes `dims` readable dimensions at `shape` (non-null).
            unsafe { std::slice::from_raw_parts(shape, dims as usize) }.to_vec()
        };
        Ok(Self {
            name: c_text(name),
            datatype,
            shape,
            buffer: None,
            attributes: None,
            lender,
        })
    }

    /// Allocates the tensor's buffer once and hands it out: the window of the client's
    /// region the output goes to when it fits (device memory only to a backend that
    /// prefers GPU memory, as it then copies there itself), else host memory, zeroed.
    /// `memory_type_io` carries the backend's preference in (null: CPU) and, with
    /// `memory_type_id`, the buffer's memory out.
    pub(crate) fn allocate(
        &mut self,
        buffer: *mut *mut c_void,
        byte_size: u64,
        memory_type_io: *mut u32,
        memory_type_id: *mut i64,
    ) -> Result<(), ErrorPtr> {
        if self.buffer.is_some() {
            return Err(invalid_arg(format!(
                "the buffer of output '{}' is already allocated",
                self.name.to_string_lossy()
            )));
        }
        let size = usize::try_from(byte_size)
            .map_err(|_| invalid_arg(format!("buffer size {byte_size} is too large")))?;
        // SAFETY: the backend's in/out parameter, or null.
        let preferred = unsafe { memory_type_io.as_ref() }
            .copied()
            .and_then(memory_kind_of)
            .unwrap_or(MemoryKind::Cpu);
        let (address, buffer_kept) = match self.lend(size, preferred) {
            Some((target, placement, address)) => (
                address as *mut c_void,
                Buffer::Lent {
                    target,
                    len: size,
                    placement,
                },
            ),
            None => {
                let mut data = vec![0u8; size];
                (data.as_mut_ptr().cast(), Buffer::Own(data))
            }
        };
        let placement = self.buffer.insert(buffer_kept).placement();
        put(buffer, address, "buffer")?;
        put(
            memory_type_io,
            memory_type_of(placement.kind),
            "memory_type",
        )?;
        put(memory_type_id, placement.id, "memory_type_id")
    }

    /// The window the request's caller lends for `size` bytes of this output, when the
    /// backend can write there: its placement and address.
    fn lend(&self, size: usize, preferred: MemoryKind) -> Option<(OutputTarget, Placement, u64)> {
        if size == 0 {
            return None;
        }
        let name = self.name.to_str().ok()?;
        let target = self.lender.as_ref()?.lend(name, size)?;
        let (placement, address) = target.lend(size)?;
        let writable = placement.kind != MemoryKind::Gpu || preferred == MemoryKind::Gpu;
        writable.then_some((target, placement, address))
    }

    /// The attributes of the allocated buffer.
    pub(crate) fn attributes(&mut self) -> Result<*mut TRITONSERVER_BufferAttributes, ErrorPtr> {
        let (byte_size, placement) = self
            .buffer
            .as_ref()
            .map(|b| (b.len(), b.placement()))
            .ok_or_else(|| invalid_arg("the output buffer is not allocated yet"))?;
        let attributes = self
            .attributes
            .insert(Box::new(TRITONSERVER_BufferAttributes {
                memory_type: memory_type_of(placement.kind),
                memory_type_id: placement.id,
                byte_size,
                cuda_ipc_handle: std::ptr::null_mut(),
            }));
        Ok(std::ptr::from_mut::<TRITONSERVER_BufferAttributes>(
            attributes,
        ))
    }

    /// Fails an output whose buffer holds fewer bytes than its shape and fixed-size
    /// datatype need (none at all when the backend never asked for one): a frontend would
    /// otherwise answer with fewer elements than the shape it reports.
    pub(crate) fn check_size(&self) -> nereid_core::Result<()> {
        let Some(datatype) = datatype_from_raw(self.datatype) else {
            return Ok(());
        };
        let (Some(size), Some(elements)) = (
            datatype.element_size(),
            nereid_core::request::element_count(&self.shape),
        ) else {
            return Ok(());
        };
        let needed = elements.saturating_mul(size);
        let held = self.buffer.as_ref().map_or(0, Buffer::len);
        if held >= needed {
            return Ok(());
        }
        Err(nereid_core::Error::internal(format!(
            "output '{}' of shape {:?} ({}) needs {needed} bytes, but the backend gave {held}",
            self.name.to_string_lossy(),
            self.shape,
            datatype.as_str()
        )))
    }

    /// The output as the core carries it: its bytes, or where in the client's region the
    /// backend wrote them.
    pub(crate) fn into_tensor(self) -> OutputTensor {
        let (data, device) = match self.buffer {
            None => (Bytes::new(), None),
            Some(Buffer::Own(data)) => (Bytes::from(data), None),
            Some(Buffer::Lent { target, len, .. }) => target.written(len),
        };
        OutputTensor {
            name: self.name.to_string_lossy().into_owned(),
            datatype: datatype_from_raw(self.datatype).unwrap_or(nereid_core::DataType::Uint8),
            shape: self.shape,
            data,
            device,
        }
    }
}

/// `TRITONBACKEND_OutputBuffer`: a buffer of `buffer_byte_size` bytes for the output,
/// owned by its response: the client's shared-memory window where the output goes to
/// one when it fits, else host memory. `memory_type` and `memory_type_id` carry the
/// backend's preference in and the buffer's memory out.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_OutputBuffer(
    output: *mut TRITONBACKEND_Output,
    buffer: *mut *mut c_void,
    buffer_byte_size: u64,
    memory_type: *mut u32,
    memory_type_id: *mut i64,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: an output of a live response, or null (checked).
        let output = unsafe { ffi::reference_mut(output, "output") }?;
        output.allocate(buffer, buffer_byte_size, memory_type, memory_type_id)
    })
}

/// `TRITONBACKEND_OutputBufferAttributes`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_OutputBufferAttributes(
    output: *mut TRITONBACKEND_Output,
    buffer_attributes: *mut *mut TRITONSERVER_BufferAttributes,
) -> ErrorPtr {
    ffi::status(|| {
        // SAFETY: an output of a live response, or null (checked).
        let output = unsafe { ffi::reference_mut(output, "output") }?;
        let attributes = output.attributes()?;
        put(buffer_attributes, attributes, "buffer_attributes")
    })
}
