//! Giving the process heap's free pages back to the system after a model unloads.
//!
//! glibc keeps memory a program frees for reuse: a freed chunk below its mmap threshold
//! stays in its arena, and each large `free` of an mmapped chunk raises that threshold
//! (up to 32 MiB), so the next buffers of that size come from an arena too. A model's
//! engine (llama.cpp's KV cache and compute buffers, ONNX Runtime's arenas) allocates
//! tens of megabytes on its own threads; after it unloads, that memory stays resident in
//! arenas nothing may use again, and a server that loads and unloads models grows until
//! a later load happens to reuse it. Triton's answer is to document swapping the
//! allocator (tcmalloc, jemalloc) by `LD_PRELOAD`; Nereid trims the heap once a model is
//! gone, which costs one pass over the arenas per unload and nothing per request.

/// Returns the whole free pages of every malloc arena to the system (`malloc_trim(0)`,
/// which since glibc 2.8 releases free pages inside arenas, not only at their tops), and
/// says whether any memory was released. Call it after a large release of memory, never
/// on a request's path: it takes each arena's lock in turn.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim only walks glibc's own arenas under their locks; it takes no
    // pointer from us and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other C libraries (musl) keep no per-thread arenas to trim: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_memory_below_the_mmap_threshold_is_returned() {
        // Blocks below the mmap threshold stay in the arena when freed; keeping every
        // other one alive stops them merging into the arena's top, so they sit in its
        // bins with whole free pages inside, which only a trim gives back.
        let mut blocks: Vec<Vec<u8>> = (0..4096).map(|_| vec![1u8; 16 * 1024]).collect();
        let mut index = 0;
        blocks.retain(|_| {
            index += 1;
            index % 2 == 0
        });
        assert!(release_free_memory());
        assert!(blocks.iter().all(|b| b[0] == 1));
    }
}
