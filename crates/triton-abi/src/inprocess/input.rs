//! One input of an in-process request: its name, declared type and shape, and the chunks
//! of the caller's memory that hold its data, read when the request is submitted. Below
//! both the request (which holds its inputs) and the C functions that add them.
#![allow(unsafe_code)]

use bytes::{Bytes, BytesMut};
use nereid_core::model::ModelSpec;
use nereid_core::raw_input::raw_input;
use nereid_core::request::InputTensor;
use nereid_core::DataType;

/// One input of a request.
pub struct Input {
    /// Name as the model knows it.
    pub(crate) name: String,
    /// Element type and shape; `None` for a raw input, whose type and shape the model
    /// configuration gives.
    pub(crate) declared: Option<(DataType, Vec<i64>)>,
    /// The appended chunks of the caller's memory, in order.
    pub(crate) chunks: Vec<Chunk>,
}

/// A chunk of an input's data in the caller's memory.
pub(crate) struct Chunk {
    base: *const u8,
    len: usize,
    /// The GPU that holds the chunk; `None` for host memory (CPU or pinned).
    device: Option<u32>,
}

impl Chunk {
    /// `len` bytes of host memory at `base` (checked non-null by the caller), read at
    /// submission.
    pub(crate) fn host(base: *const u8, len: usize) -> Self {
        Self {
            base,
            len,
            device: None,
        }
    }

    /// `len` bytes of `device`'s memory at `base`, copied to the host at submission
    /// through the CUDA driver (Nereid's backends read host memory).
    pub(crate) fn device(base: *const u8, len: usize, device: u32) -> Self {
        Self {
            base,
            len,
            device: Some(device),
        }
    }
}

impl Input {
    /// The core's tensor for this input of a request to `spec`.
    ///
    /// # Safety
    /// Every chunk must still be readable: the caller keeps input buffers alive until the
    /// request is released, as Triton's API requires.
    pub(crate) unsafe fn to_core(&self, spec: &ModelSpec) -> nereid_core::Result<InputTensor> {
        let mut data = BytesMut::with_capacity(self.chunks.iter().map(|c| c.len).sum());
        for chunk in &self.chunks {
            match chunk.device {
                // SAFETY: a non-null chunk of `len` readable host bytes (see above).
                None => data.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(chunk.base, chunk.len)
                }),
                Some(device) => {
                    // SAFETY: device memory the caller keeps allocated (see above).
                    let copied = unsafe {
                        nereid_shm::copy_device_to_host(device, chunk.base as u64, chunk.len)
                    }
                    .map_err(|e| {
                        nereid_core::Error::internal(format!(
                            "input '{}': reading GPU {device} memory: {e}",
                            self.name
                        ))
                    })?;
                    data.extend_from_slice(&copied);
                }
            }
        }
        let data: Bytes = data.freeze();
        match &self.declared {
            Some((datatype, shape)) => Ok(InputTensor {
                name: self.name.clone(),
                datatype: *datatype,
                shape: shape.clone(),
                data,
                device: None,
            }),
            None => raw_input(spec, data),
        }
    }
}
