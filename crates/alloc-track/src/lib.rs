//! Test support for the fuzz targets (`nereid_core::testing::fuzz`): [`TrackingAllocator`],
//! the system allocator recording per thread the largest single allocation asked for, so
//! a hostile length that makes a decoder reserve gigabytes fails a test instead of
//! passing silently. A crate of its own because `GlobalAlloc` is an unsafe trait and the
//! core forbids `unsafe`; never linked into the server.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Largest single allocation an iteration may make. Seed inputs are a few KiB, so
/// anything near this is a length taken from the input without a check.
pub const ALLOCATION_LIMIT: usize = 64 << 20;

/// Tells the allocator which fuzz iteration this thread is checking (`None`: none), so
/// an allocation the system may refuse names it before the process aborts.
pub fn set_iteration(iteration: Option<u64>) {
    ITERATION.with(|i| i.set(iteration));
}

thread_local! {
    // Written by the allocator on this thread; a `const` initializer without drop glue,
    // so reading it from inside the allocator never allocates or registers a destructor.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    // The fuzz iteration checked on this thread, for the allocator's last words.
    static ITERATION: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Forgets the largest allocation seen so far on this thread.
pub fn reset_largest_allocation() {
    LARGEST.with(|l| l.set(0));
}

/// The largest single allocation (or reallocation target) this thread asked for since
/// [`reset_largest_allocation`]; 0 unless the test binary installs [`TrackingAllocator`].
pub fn largest_allocation() -> usize {
    LARGEST.with(Cell::get)
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| {
        if size > l.get() {
            l.set(size);
        }
    });
    if size > ALLOCATION_LIMIT {
        if let Ok(Some(iteration)) = ITERATION.try_with(Cell::get) {
            // The system may refuse it and abort the process before `run` can report.
            say_without_allocating(&[
                b"fuzz: iteration ",
                decimal(iteration, &mut [0; 20]),
                b" asks for ",
                decimal(size as u64, &mut [0; 20]),
                b" bytes at once\n",
            ]);
        }
    }
}

/// `n` in decimal, written into the end of `buffer`.
fn decimal(mut n: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buffer[at..];
        }
    }
}

/// Writes `parts` to stderr with plain `write` calls: inside the allocator, nothing may
/// allocate.
fn say_without_allocating(parts: &[&[u8]]) {
    for part in parts {
        // SAFETY: `part` is a live slice of `part.len()` bytes; fd 2 is stderr, and a
        // failed write is ignored.
        unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
    }
}

/// The system allocator, recording per thread the largest size asked for. A fuzz test
/// binary installs it with `#[global_allocator]` so a fuzz run can check every iteration.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrackingAllocator;

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; recording a size touches only a thread-local `Cell` and never
// allocates.
unsafe impl GlobalAlloc for TrackingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation here is).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`, and the caller's guarantees for `new_size` hold.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
