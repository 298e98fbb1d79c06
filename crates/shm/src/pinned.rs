//! Pinned (page-locked) host memory for backends that ask for `CPU_PINNED` buffers,
//! bounded by `--pinned-memory-pool-byte-size` (Triton's default: 256 MiB).
//!
//! Triton reserves the whole pool with `cudaHostAlloc` at start-up and reports it in
//! `nv_pinned_memory_pool_total_bytes` whether or not anything uses it (and reports the
//! size asked for even where the allocation failed, as on a machine without CUDA).
//! Nereid pins on demand instead: the pool is a budget, each buffer is allocated when a
//! backend asks and locked into RAM with `mlock` (what pinned means to the kernel; CUDA
//! copies from such pages without staging), and given back when freed, so an idle server
//! holds none of it. The gauges then say the same as Triton's: the pool's size, and the
//! bytes pinned now. A buffer the budget or the system's lock limit (`RLIMIT_MEMLOCK`)
//! cannot take is refused here; the caller serves it from ordinary memory, as Triton
//! falls back to unpinned memory where it may.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Triton's default pool size, `--pinned-memory-pool-byte-size`'s default.
pub const DEFAULT_POOL_BYTES: u64 = 256 * 1024 * 1024;

/// Pinned buffers start on a page and fill whole pages: `mlock` works on pages, and
/// unlocking one buffer must not unlock a page another buffer shares.
const PAGE: usize = 4096;

/// The process's pool (Triton's pinned memory manager is one per process too): the
/// server sets its size at start-up, the metrics read it.
pub static POOL: PinnedPool = PinnedPool::new(DEFAULT_POOL_BYTES);

/// A budget of pinned host memory and what of it is in use.
#[derive(Debug)]
pub struct PinnedPool {
    total: AtomicU64,
    used: AtomicU64,
}

impl PinnedPool {
    /// A pool of `total` bytes, none in use.
    pub const fn new(total: u64) -> Self {
        Self {
            total: AtomicU64::new(total),
            used: AtomicU64::new(0),
        }
    }

    /// Sets the pool's size; buffers pinned already stay pinned (they count against the
    /// new size until freed).
    pub fn set_total(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
    }

    /// The pool's size in bytes (`nv_pinned_memory_pool_total_bytes`).
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Bytes pinned now (`nv_pinned_memory_pool_used_bytes`).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// A pinned buffer of at least `bytes` bytes (whole pages), or `None` when the pool
    /// has not that much left, the allocation fails or the system refuses to lock it.
    pub fn allocate(&'static self, bytes: usize) -> Option<PinnedBuffer> {
        let size = bytes.max(1).checked_next_multiple_of(PAGE)?;
        let layout = Layout::from_size_align(size, PAGE).ok()?;
        let charged = size as u64;
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(charged)
                    .filter(|&after| after <= self.total())
            })
            .ok()?;
        let refund = || {
            self.used.fetch_sub(charged, Ordering::Relaxed);
        };
        // SAFETY: a non-zero size with a power-of-two alignment.
        let Some(pointer) = NonNull::new(unsafe { std::alloc::alloc(layout) }) else {
            refund();
            return None;
        };
        // SAFETY: `pointer` is the start of `size` bytes just allocated, all ours.
        if unsafe { libc::mlock(pointer.as_ptr().cast(), size) } != 0 {
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(pointer.as_ptr(), layout) };
            refund();
            return None;
        }
        Some(PinnedBuffer {
            pointer,
            layout,
            pool: self,
        })
    }
}

/// A page-locked buffer of the pool, unlocked and given back when dropped.
#[derive(Debug)]
pub struct PinnedBuffer {
    pointer: NonNull<u8>,
    layout: Layout,
    pool: &'static PinnedPool,
}

// SAFETY: the buffer is plain memory owned by this value alone; moving it to another
// thread moves that ownership.
unsafe impl Send for PinnedBuffer {}

impl PinnedBuffer {
    /// The buffer's first byte, for the backend that asked for it.
    pub fn as_ptr(&self) -> *mut u8 {
        self.pointer.as_ptr()
    }

    /// How many bytes it holds (the request rounded up to whole pages).
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Never: a buffer holds at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let size = self.layout.size();
        // SAFETY: the pages locked in `allocate`, still allocated (freed just below).
        unsafe { libc::munlock(self.pointer.as_ptr().cast(), size) };
        // SAFETY: allocated in `allocate` with this layout, not freed since.
        unsafe { std::alloc::dealloc(self.pointer.as_ptr(), self.layout) };
        self.pool.used.fetch_sub(size as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(total: u64) -> &'static PinnedPool {
        Box::leak(Box::new(PinnedPool::new(total)))
    }

    #[test]
    fn buffers_count_in_whole_pages_until_dropped() {
        let pool = pool(4 * PAGE as u64);
        let one = pool.allocate(64).expect("a page is locked");
        assert_eq!((one.len(), pool.used()), (PAGE, PAGE as u64));
        assert_eq!(one.as_ptr() as usize % PAGE, 0);
        // SAFETY: the buffer's own first page.
        unsafe { one.as_ptr().write_bytes(7, PAGE) };
        let two = pool.allocate(PAGE + 1).expect("two more pages");
        assert_eq!(pool.used(), 3 * PAGE as u64);
        drop(one);
        drop(two);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn the_budget_refuses_what_it_cannot_hold() {
        let pool = pool(2 * PAGE as u64);
        let held = pool.allocate(2 * PAGE).expect("the whole pool");
        assert!(pool.allocate(1).is_none());
        assert_eq!(pool.used(), 2 * PAGE as u64);
        drop(held);
        assert!(pool.allocate(1).is_some());
        pool.set_total(0);
        assert!(pool.allocate(1).is_none());
    }
}
