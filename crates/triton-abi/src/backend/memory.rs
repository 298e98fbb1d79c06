//! `TRITONBACKEND_MemoryManager`: the allocator a backend borrows buffers from. CPU
//! memory comes from the heap; pinned memory from the process's pinned pool
//! ([`nereid_shm::pinned`]), or the heap when the pool cannot take it (Triton's CPU-only
//! build refuses pinned requests outright); GPU memory from the GPU's CUDA memory pool
//! ([`nereid_shm::cuda_pool`]), refused in Triton's words where CUDA is not available.
#![allow(unsafe_code)]

use std::alloc::Layout;
use std::ffi::c_void;

use nereid_shm::pinned::{self, PinnedBuffer};
use parking_lot::Mutex;

use crate::error::{from_core, invalid_arg, unsupported, ErrorPtr};
use crate::ffi::{self, put};
use crate::types::memory_type;

/// Buffers are aligned like Triton's CPU allocations (malloc's guarantee).
const ALIGNMENT: usize = 16;

/// The object behind `TRITONBACKEND_MemoryManager*`: the live allocations by address,
/// so `Free` can release them.
#[derive(Default)]
pub struct TRITONBACKEND_MemoryManager {
    live: Mutex<std::collections::HashMap<usize, Allocation>>,
}

/// A buffer handed to a backend.
enum Allocation {
    /// From the heap, with its layout.
    Heap(Layout),
    /// From the pinned pool; dropping it unpins it and gives it back.
    Pinned(PinnedBuffer),
    /// From the CUDA memory pool of this GPU.
    Device(i64),
}

/// `TRITONBACKEND_MemoryManagerAllocate`: `byte_size` bytes of CPU memory, pinned when
/// the backend asks for `CPU_PINNED` and the pinned pool can take them, or of GPU
/// `memory_type_id`'s memory from its CUDA memory pool.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_MemoryManagerAllocate(
    manager: *mut TRITONBACKEND_MemoryManager,
    buffer: *mut *mut c_void,
    memory_type_requested: u32,
    memory_type_id: i64,
    byte_size: u64,
) -> ErrorPtr {
    with_manager(manager, |m| {
        if memory_type_requested == memory_type::GPU {
            let address = allocate_on_gpu(memory_type_id, byte_size)?;
            m.live
                .lock()
                .insert(address as usize, Allocation::Device(memory_type_id));
            return put(buffer, address as *mut c_void, "buffer");
        }
        let size = usize::try_from(byte_size.max(1))
            .map_err(|_| invalid_arg(format!("allocation of {byte_size} bytes is too large")))?;
        if memory_type_requested == memory_type::CPU_PINNED {
            if let Some(pinned) = pinned::POOL.allocate(size) {
                let pointer = pinned.as_ptr();
                m.live
                    .lock()
                    .insert(pointer as usize, Allocation::Pinned(pinned));
                return put(buffer, pointer.cast(), "buffer");
            }
        }
        let layout = Layout::from_size_align(size, ALIGNMENT)
            .map_err(|_| invalid_arg(format!("allocation of {byte_size} bytes is too large")))?;
        // SAFETY: a non-zero size with a valid alignment.
        let pointer = unsafe { std::alloc::alloc(layout) };
        if pointer.is_null() {
            return Err(unsupported(format!("failed to allocate {byte_size} bytes")));
        }
        m.live
            .lock()
            .insert(pointer as usize, Allocation::Heap(layout));
        put(buffer, pointer.cast(), "buffer")
    })
}

/// `TRITONBACKEND_MemoryManagerFree`: releases a buffer from `Allocate`.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_MemoryManagerFree(
    manager: *mut TRITONBACKEND_MemoryManager,
    buffer: *mut c_void,
    _memory_type: u32,
    _memory_type_id: i64,
) -> ErrorPtr {
    with_manager(manager, |m| {
        let allocation = m
            .live
            .lock()
            .remove(&(buffer as usize))
            .ok_or_else(|| invalid_arg("buffer was not allocated by this memory manager"))?;
        match allocation {
            // SAFETY: allocated above with this layout and not freed since.
            Allocation::Heap(layout) => unsafe { std::alloc::dealloc(buffer.cast(), layout) },
            Allocation::Pinned(pinned) => drop(pinned),
            Allocation::Device(device) => nereid_shm::cuda_pool::POOLS
                .free(device, buffer as u64)
                .map_err(|e| shm_error(&e))?,
        }
        Ok(())
    })
}

/// `byte_size` bytes from `device`'s CUDA memory pool; without a usable CUDA driver,
/// Triton's CPU build's refusal with the reason.
fn allocate_on_gpu(device: i64, byte_size: u64) -> Result<u64, ErrorPtr> {
    if let Err(why) = nereid_shm::cuda_available() {
        return Err(unsupported(format!(
            "GPU memory allocation not supported: {}",
            why.message()
        )));
    }
    nereid_shm::cuda_pool::POOLS
        .allocate(device, byte_size)
        .map_err(|e| shm_error(&e))
}

/// A memory error as a Triton error of the matching code (through the core's kinds).
fn shm_error(error: &nereid_shm::Error) -> ErrorPtr {
    from_core(&nereid_core::Error::from(error.clone()))
}

/// Runs `body` on the object behind `manager` (checked for null).
fn with_manager(
    manager: *mut TRITONBACKEND_MemoryManager,
    body: impl FnOnce(&TRITONBACKEND_MemoryManager) -> Result<(), ErrorPtr>,
) -> ErrorPtr {
    // SAFETY: the backend's memory manager, or null (checked).
    unsafe { ffi::with(manager, "manager", body) }
}
