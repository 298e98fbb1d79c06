//! The raw memory behind Triton's shared-memory extension, in its own crate so that the
//! `unsafe` it needs stays here and `nereid-core` can forbid it:
//!
//! - [`Mapping`]: a bounds-checked `mmap` window of a POSIX shared-memory object, whose
//!   descriptor stays open so each use can check the client did not shrink the object.
//! - [`sigbus`]: the SIGBUS handler that repairs a page the client truncated away, so a
//!   shrunken object fails requests instead of killing the process.
//! - [`DeviceMemory`]: CUDA device memory of another process opened from its IPC handle,
//!   through the CUDA driver loaded at run time (the binary runs without CUDA).
//! - [`heap`]: giving freed heap pages back to the system after a model unloads.
//! - [`cuda_pool`]: device memory for backends that ask for GPU buffers, within
//!   `--cuda-memory-pool-byte-size`.
//! - [`pinned`]: page-locked buffers for backends that ask for pinned memory, within
//!   `--pinned-memory-pool-byte-size`.
//!
//! The core's shared-memory registry (`nereid_core::shm`) owns regions, names and
//! Triton's messages; this crate only knows memory. Errors carry a kind the core maps
//! onto its own (invalid argument, internal, unavailable).
#![allow(unsafe_code)]

mod cuda;
pub mod cuda_pool;
mod error;
pub mod heap;
mod mapping;
pub mod pinned;
pub mod sigbus;

pub use cuda::{
    available as cuda_available, copy_device_to_host, copy_host_to_device,
    device_count as gpu_count, device_uuid as gpu_uuid, DeviceMemory, BAD_HANDLE, IPC_HANDLE_SIZE,
    LIBRARY_ENV,
};
pub use error::{Error, ErrorKind, Result};
pub use mapping::Mapping;
pub use sigbus::MAX_MAPPINGS;
