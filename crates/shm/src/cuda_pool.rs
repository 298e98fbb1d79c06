//! The CUDA memory pools backends borrow device memory from
//! (`TRITONBACKEND_MemoryManagerAllocate` with `TRITONSERVER_MEMORY_GPU`): one per GPU,
//! `--cuda-memory-pool-byte-size` each (Triton's 64 MiB by default), a device without a
//! size given gets the default and one given 0 gets no pool.
//!
//! Triton reserves every pool at start-up (CNMeM, fixed size, never grows). Nereid
//! reserves a GPU's pool the first time a backend asks for memory on it, as one
//! `cuMemAlloc` of the pool's size, so a server whose backends manage their own GPU memory
//! holds none of it; after that the pool is Triton's: pieces of the block are handed out
//! and given back ([`Arena`]), a request the block has no room for fails (the pool does
//! not grow), and the sizes are fixed once a pool exists.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

use crate::cuda::OwnedDeviceMemory;
use crate::error::{Error, Result};

/// Triton's pool size for a GPU `--cuda-memory-pool-byte-size` does not name.
pub const DEFAULT_POOL_BYTES: u64 = 64 * 1024 * 1024;

/// Pieces start on this boundary (what `cudaMalloc` guarantees, and CNMeM too).
const ALIGNMENT: u64 = 256;

/// The process's pools (one per process, as Triton's CUDA memory manager): the server
/// sets the sizes at start-up, backends allocate through the memory manager.
pub static POOLS: CudaPools = CudaPools::new();

/// The pools of every GPU, by device id.
#[derive(Debug)]
pub struct CudaPools {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// `--cuda-memory-pool-byte-size` sizes by device id; others get the default.
    sizes: BTreeMap<i64, u64>,
    /// The pools reserved so far.
    reserved: BTreeMap<i64, DevicePool>,
}

/// One GPU's reserved block and what of it is handed out.
#[derive(Debug)]
struct DevicePool {
    block: OwnedDeviceMemory,
    arena: Arena,
}

impl CudaPools {
    const fn new() -> Self {
        Self {
            state: Mutex::new(State {
                sizes: BTreeMap::new(),
                reserved: BTreeMap::new(),
            }),
        }
    }

    /// Sets the pool sizes (`(device, bytes)`, the last one given for a device winning).
    /// A pool already reserved keeps its size: as Triton's, pools are created once per
    /// process.
    pub fn configure(&self, sizes: &[(i32, u64)]) {
        let mut state = self.state.lock();
        state.sizes = sizes
            .iter()
            .map(|&(device, bytes)| (i64::from(device), bytes))
            .collect();
    }

    /// The size of `device`'s pool: the one configured, else Triton's default.
    pub fn size(&self, device: i64) -> u64 {
        let state = self.state.lock();
        state.size(device)
    }

    /// `bytes` bytes of device memory from `device`'s pool (reserved on first use), as a
    /// device address; the error says why not in Triton's terms.
    pub fn allocate(&self, device: i64, bytes: u64) -> Result<u64> {
        let mut state = self.state.lock();
        let size = state.size(device);
        if size == 0 {
            return Err(Error::unavailable(format!(
                "CudaMemoryManager has no preallocated CUDA memory on GPU {device} \
                 (--cuda-memory-pool-byte-size={device}:0)"
            )));
        }
        let pool = match state.reserved.entry(device) {
            std::collections::btree_map::Entry::Occupied(pool) => pool.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let ordinal = u32::try_from(device)
                    .map_err(|_| Error::invalid_arg(format!("GPU {device} does not exist")))?;
                let len = usize::try_from(size).map_err(|_| {
                    Error::internal(format!("a CUDA memory pool of {size} bytes is too large"))
                })?;
                let block = OwnedDeviceMemory::allocate(ordinal, len).map_err(|e| {
                    Error::new(
                        e.kind(),
                        format!(
                            "Failed to create the CUDA memory pool of {size} bytes on GPU \
                             {device}: {}",
                            e.message()
                        ),
                    )
                })?;
                tracing::info!("CUDA memory pool is created on device {device} with size {size}");
                slot.insert(DevicePool {
                    block,
                    arena: Arena::new(size),
                })
            }
        };
        let offset = pool.arena.allocate(bytes).ok_or_else(|| {
            Error::internal(format!(
                "Failed to allocate CUDA memory with byte size {bytes} on GPU {device}: the \
                 pool of {size} bytes has no {bytes} free bytes in one piece \
                 (--cuda-memory-pool-byte-size)"
            ))
        })?;
        Ok(pool.block.address() + offset)
    }

    /// Gives back memory [`Self::allocate`] handed out on `device`.
    pub fn free(&self, device: i64, address: u64) -> Result<()> {
        let mut state = self.state.lock();
        let freed = state.reserved.get_mut(&device).and_then(|pool| {
            let offset = address.checked_sub(pool.block.address())?;
            pool.arena.free(offset).then_some(())
        });
        freed.ok_or_else(|| {
            Error::invalid_arg(format!(
                "Failed to deallocate CUDA memory at address {address:#x} on GPU {device}: it \
                 was not allocated from that GPU's pool"
            ))
        })
    }
}

impl State {
    fn size(&self, device: i64) -> u64 {
        match self.reserved.get(&device) {
            Some(pool) => pool.arena.capacity,
            None => self
                .sizes
                .get(&device)
                .copied()
                .unwrap_or(DEFAULT_POOL_BYTES),
        }
    }
}

/// First-fit placement of pieces in a block of `capacity` bytes, by offset: the free
/// ranges in address order (neighbours merged when a piece comes back) and the pieces
/// handed out with their sizes.
#[derive(Debug)]
struct Arena {
    capacity: u64,
    /// Free ranges, offset → length, never adjacent to each other.
    free: BTreeMap<u64, u64>,
    /// Pieces handed out, offset → length.
    used: HashMap<u64, u64>,
}

impl Arena {
    fn new(capacity: u64) -> Self {
        Self {
            capacity,
            free: BTreeMap::from([(0, capacity)]),
            used: HashMap::new(),
        }
    }

    /// The offset of a piece of at least `bytes` bytes (whole [`ALIGNMENT`] units, one
    /// unit for 0), or `None` when no free range is that long.
    fn allocate(&mut self, bytes: u64) -> Option<u64> {
        let len = bytes.max(1).checked_next_multiple_of(ALIGNMENT)?;
        let (&offset, &room) = self.free.iter().find(|(_, &room)| room >= len)?;
        self.free.remove(&offset);
        if room > len {
            self.free.insert(offset + len, room - len);
        }
        self.used.insert(offset, len);
        Some(offset)
    }

    /// Gives back the piece at `offset`; false when no piece starts there.
    fn free(&mut self, offset: u64) -> bool {
        let Some(mut len) = self.used.remove(&offset) else {
            return false;
        };
        let mut start = offset;
        if let Some(after) = self.free.remove(&(offset + len)) {
            len += after;
        }
        if let Some((&before, &before_len)) = self.free.range(..offset).next_back() {
            if before + before_len == offset {
                self.free.remove(&before);
                start = before;
                len += before_len;
            }
        }
        self.free.insert(start, len);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_aligned_and_refused_once_the_block_is_full() {
        let mut arena = Arena::new(1024);
        assert_eq!(arena.allocate(1), Some(0));
        assert_eq!(arena.allocate(0), Some(256));
        assert_eq!(arena.allocate(300), Some(512));
        assert_eq!(arena.allocate(1), None);
        assert!(arena.free(256));
        assert_eq!(arena.allocate(257), None, "one free unit is not two");
        assert_eq!(arena.allocate(200), Some(256));
    }

    #[test]
    fn given_back_neighbours_merge_into_one_range() {
        let mut arena = Arena::new(1024);
        let pieces: Vec<u64> = (0..4).filter_map(|_| arena.allocate(256)).collect();
        assert_eq!(pieces, [0, 256, 512, 768]);
        assert!(arena.free(256));
        assert!(arena.free(768));
        assert!(arena.free(512));
        assert_eq!(arena.free.len(), 1, "{:?}", arena.free);
        assert_eq!(arena.allocate(768), Some(256));
        assert!(arena.free(0));
        assert!(arena.free(256));
        assert_eq!(arena.free, BTreeMap::from([(0, 1024)]));
    }

    #[test]
    fn only_a_piece_handed_out_can_be_given_back() {
        let mut arena = Arena::new(512);
        assert_eq!(arena.allocate(10), Some(0));
        assert!(!arena.free(8));
        assert!(arena.free(0));
        assert!(!arena.free(0), "a piece is given back once");
    }

    #[test]
    fn a_pool_sized_zero_refuses_and_sizes_default_to_tritons() {
        let pools = CudaPools::new();
        pools.configure(&[(0, 0), (1, 4096), (1, 8192)]);
        let refused = pools.allocate(0, 16).err();
        assert!(
            refused.is_some_and(|e| e.kind() == crate::ErrorKind::Unavailable
                && e.message().contains("no preallocated CUDA memory on GPU 0"))
        );
        assert_eq!(pools.size(1), 8192, "the last size given for a device wins");
        assert_eq!(pools.size(2), DEFAULT_POOL_BYTES);
    }
}
