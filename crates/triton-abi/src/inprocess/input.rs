//! One input of an in-process request: its name, declared type and shape, and the chunks
//! of the caller's memory that hold its data, read when the request is submitted. Below
//! both the request (which holds its inputs) and the C functions that add them.

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

/// A chunk of an input's data in the caller's host memory.
pub(crate) struct Chunk {
    base: *const u8,
    len: usize,
}

impl Chunk {
    /// `len` bytes at `base` (checked non-null by the caller), read at submission.
    pub(crate) fn new(base: *const u8, len: usize) -> Self {
        Self { base, len }
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
            // SAFETY: a non-null chunk of `len` readable bytes (see above).
            data.extend_from_slice(unsafe { std::slice::from_raw_parts(chunk.base, chunk.len) });
        }
        let data: Bytes = data.freeze();
        match &self.declared {
            Some((datatype, shape)) => Ok(InputTensor {
                name: self.name.clone(),
                datatype: *datatype,
                shape: shape.clone(),
                data,
            }),
            None => raw_input(spec, data),
        }
    }
}
