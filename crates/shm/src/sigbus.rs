//! Survives a client shrinking (ftruncate) a POSIX shared-memory object it registered.
//! Touching a mapped page past the object's new end raises SIGBUS, which kills the process
//! by default. Every system region's mapping is listed here; a SIGBUS inside one of them
//! puts a private zero page over the lost page, so the access completes, and marks the
//! mapping damaged: the request checks see the mark and answer errors from then on. A
//! SIGBUS anywhere else goes to the handler that was installed before (Rust's own, which
//! lets it kill the process as usual).
//!
//! The handler may only touch what is async-signal-safe: the table is a fixed array of
//! atomics and the repair is one `mmap` call.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many system regions can be mapped at once; `--shm-max-regions` may not exceed it.
pub const MAX_MAPPINGS: usize = 16384;

/// One live mapping `[start, end)`; `end == 0` marks a free slot.
struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    damaged: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // only used to initialize `SLOTS`
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    damaged: AtomicBool::new(false),
};

static SLOTS: [Slot; MAX_MAPPINGS] = [FREE; MAX_MAPPINGS];
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);
/// Repairs made so far; a request compares it before and after to know whether to look.
static REPAIRS: AtomicU64 = AtomicU64::new(0);
/// The SIGBUS disposition before ours, to pass on faults that are not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// A mapping's entry in the table, removed on drop (before the caller unmaps).
#[derive(Debug)]
pub struct Guarded {
    slot: usize,
}

impl Guarded {
    /// Lists `[start, start + len)`; `None` when every slot is taken.
    pub fn watch(start: usize, len: usize) -> Option<Self> {
        install();
        for (index, slot) in SLOTS.iter().enumerate() {
            // `start` goes first, then `end` claims the slot: a free slot has end 0.
            if slot.end.load(Ordering::Acquire) != 0 {
                continue;
            }
            if slot
                .end
                .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                slot.damaged.store(false, Ordering::Release);
                slot.start.store(start, Ordering::Release);
                slot.end.store(start + len, Ordering::Release);
                return Some(Self { slot: index });
            }
        }
        None
    }

    /// Whether a fault inside the mapping was repaired with a zero page.
    pub fn damaged(&self) -> bool {
        SLOTS[self.slot].damaged.load(Ordering::Acquire)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let slot = &SLOTS[self.slot];
        slot.start.store(0, Ordering::Release);
        slot.end.store(0, Ordering::Release);
    }
}

/// How many lost pages were repaired so far, process-wide.
pub fn repairs() -> u64 {
    REPAIRS.load(Ordering::Acquire)
}

/// Whether `[start, start + len)` overlaps a listed mapping that had a page repaired.
pub fn damaged_within(start: usize, len: usize) -> bool {
    let end = start.saturating_add(len);
    SLOTS.iter().any(|slot| {
        let (s, e) = (
            slot.start.load(Ordering::Acquire),
            slot.end.load(Ordering::Acquire),
        );
        e != 0 && e != usize::MAX && start < e && s < end && slot.damaged.load(Ordering::Acquire)
    })
}

/// Installs the handler once per process.
fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if let Ok(page) = usize::try_from(page) {
            PAGE_SIZE.store(page, Ordering::Release);
        }
        // SAFETY: an all-zero sigaction is a valid value to fill in; `sigemptyset` gets a
        // valid pointer; `sigaction` gets valid new/old pointers. `on_sigbus` has the
        // signature SA_SIGINFO requires.
        unsafe {
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_sigbus as *const () as usize;
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &ours, &mut previous) != 0 {
                tracing::warn!(
                    "cannot install the SIGBUS handler: a client truncating its shared memory object can stop the server"
                );
            }
            previous
        }
    });
}

extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let address = unsafe { (*info).si_addr() } as usize;
    let page = PAGE_SIZE.load(Ordering::Acquire);
    for slot in &SLOTS {
        let (start, end) = (
            slot.start.load(Ordering::Acquire),
            slot.end.load(Ordering::Acquire),
        );
        if end == 0 || end == usize::MAX || address < start || address >= end {
            continue;
        }
        let lost_page = address - address % page;
        // SAFETY: the page lies inside a mapping this process made and still owns (its
        // slot is live); MAP_FIXED replaces just that page with private zeros, so the
        // faulting access can complete. mmap is async-signal-safe.
        let repaired = unsafe {
            libc::mmap(
                lost_page as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if repaired != libc::MAP_FAILED {
            slot.damaged.store(true, Ordering::Release);
            REPAIRS.fetch_add(1, Ordering::AcqRel);
            return;
        }
    }
    pass_on(signal, info, context);
}

/// Hands a fault that is not ours to the previous handler, or restores the default action
/// so that returning re-raises it.
fn pass_on(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let previous = PREVIOUS.get();
    let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask; restoring the
        // default makes the re-executed access kill the process, as without this module.
        unsafe {
            let default: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
        return;
    }
    let siginfo = previous.is_some_and(|p| p.sa_flags & libc::SA_SIGINFO != 0);
    // SAFETY: `handler` is the function the previous sigaction installed, with the
    // signature its SA_SIGINFO flag declares.
    unsafe {
        if siginfo {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(handler);
            f(signal, info, context);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            f(signal);
        }
    }
}
