//! Where a request's tensors live in a registered shared-memory region: what the
//! clients put on the wire instead of tensor data. The `shm` module lays the regions out
//! and registers them; the clients only read these.

/// Where one tensor lives in a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmRef {
    /// Byte offset in the region.
    pub offset: u64,
    /// Bytes reserved (an input's exact size; an output's capacity).
    pub byte_size: u64,
}

/// The shared-memory placement of one request's tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmPlacement {
    /// Registered region name.
    pub region: String,
    /// One per input of the request, in order.
    pub inputs: Vec<ShmRef>,
    /// One per requested output, in order.
    pub outputs: Vec<ShmRef>,
}
