/* alloc_count.c - an LD_PRELOAD shim that counts a process's heap allocations, for
 * scripts/bench_vs_triton.py --allocs (issue 37: bytes allocated per cache hit and per
 * model request, measured).
 *
 *   cc -O2 -shared -fPIC -o alloc_count.so scripts/alloc_count.c -ldl
 *   NEREID_ALLOC_COUNT_FILE=/tmp/counts LD_PRELOAD=$PWD/alloc_count.so target/release/nereid ...
 *
 * It wraps the glibc malloc family (malloc, calloc, realloc, free, posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc) and adds to counters kept in a file-backed
 * shared mapping, so a benchmark reads them from the file before and after a load, with
 * no signal and no cooperation from the server; children that inherit LD_PRELOAD (Triton's
 * python backend stubs) add to the same counters. The file holds COUNTERS little-endian
 * u64 at offset 0, in the order of enum counter below. Without the variable the counts go
 * to a private static block (nothing to read, nothing breaks).
 *
 * Only allocators that call the C library's malloc are seen: Rust's System allocator (what
 * Nereid uses) and C++'s operator new are; a Rust global allocator such as mimalloc or
 * jemalloc is not. Counting is one relaxed atomic add per counter per call, on a shared
 * cache line: the server runs slower under the shim, which is why the benchmark measures
 * allocations on a separate server from the one it measures CPU on.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum counter {
    C_MALLOC,   /* malloc calls */
    C_CALLOC,   /* calloc calls */
    C_REALLOC,  /* realloc calls (any pointer, any size) */
    C_ALIGNED,  /* posix_memalign, aligned_alloc, memalign, valloc, pvalloc calls */
    C_FREE,     /* free calls with a non-null pointer */
    C_BYTES,    /* bytes requested by all the allocating calls above (realloc: the new size) */
    COUNTERS = 8
};

#define MAP_BYTES 4096

static uint64_t private_counts[COUNTERS];
static uint64_t *counts = private_counts;

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);

/* dlsym itself may call calloc (its error buffer) before the real functions are known:
 * those few early blocks come from this static buffer and are never given back. Each
 * block carries its size in a 16-byte header so realloc can copy it out. */
static _Alignas(16) char bump[16384];
static size_t bump_used;
static int resolving;

static int from_bump(const void *p) {
    return (const char *)p >= bump && (const char *)p < bump + sizeof bump;
}

static void *bump_alloc(size_t size) {
    size_t need = (size + 16 + 15) & ~(size_t)15;
    size_t at = __atomic_fetch_add(&bump_used, need, __ATOMIC_RELAXED);
    if (at + need > sizeof bump)
        return NULL;
    *(size_t *)(bump + at) = size;
    return bump + at + 16;  /* static storage: already zero, so calloc is served too */
}

static void add(enum counter c, uint64_t n) {
    __atomic_fetch_add(&counts[c], n, __ATOMIC_RELAXED);
}

static void resolve(void) {
    if (real_malloc || resolving)
        return;
    resolving = 1;
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_free = dlsym(RTLD_NEXT, "free");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = dlsym(RTLD_NEXT, "memalign");
    real_valloc = dlsym(RTLD_NEXT, "valloc");
    real_pvalloc = dlsym(RTLD_NEXT, "pvalloc");
    /* malloc last: its being set is what tells the wrappers the others are. */
    __atomic_store_n(&real_malloc, (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc"), __ATOMIC_RELEASE);
    resolving = 0;
}

/* Map the counter file; open, ftruncate and mmap are system calls that do not allocate. */
__attribute__((constructor)) static void start(void) {
    resolve();
    const char *path = getenv("NEREID_ALLOC_COUNT_FILE");
    if (!path || !*path)
        return;
    int saved = errno;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && st.st_size < MAP_BYTES && ftruncate(fd, MAP_BYTES) != 0)
            st.st_size = -1;
        void *map = st.st_size < 0 ? MAP_FAILED : mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map != MAP_FAILED)
            counts = map;
        close(fd);
    }
    errno = saved;
}

void *malloc(size_t size) {
    if (!real_malloc) {
        resolve();
        if (!real_malloc)
            return bump_alloc(size);
    }
    add(C_MALLOC, 1);
    add(C_BYTES, size);
    return real_malloc(size);
}

void *calloc(size_t n, size_t size) {
    if (!real_malloc) {
        resolve();
        if (!real_malloc)
            return bump_alloc(n * size);
    }
    add(C_CALLOC, 1);
    add(C_BYTES, (uint64_t)n * size);
    return real_calloc(n, size);
}

void *realloc(void *p, size_t size) {
    if (!real_malloc) {
        resolve();
        if (!real_malloc) {
            void *q = bump_alloc(size);
            if (q && p)
                memcpy(q, p, *(size_t *)((char *)p - 16) < size ? *(size_t *)((char *)p - 16) : size);
            return q;
        }
    }
    add(C_REALLOC, 1);
    add(C_BYTES, size);
    if (from_bump(p)) {
        size_t old = *(size_t *)((char *)p - 16);
        void *q = real_malloc(size);
        if (q)
            memcpy(q, p, old < size ? old : size);
        return q;
    }
    return real_realloc(p, size);
}

void free(void *p) {
    if (!p || from_bump(p))
        return;
    if (!real_malloc)
        resolve();
    add(C_FREE, 1);
    if (real_free)
        real_free(p);
}

int posix_memalign(void **out, size_t align, size_t size) {
    resolve();
    add(C_ALIGNED, 1);
    add(C_BYTES, size);
    return real_posix_memalign(out, align, size);
}

void *aligned_alloc(size_t align, size_t size) {
    resolve();
    add(C_ALIGNED, 1);
    add(C_BYTES, size);
    return real_aligned_alloc(align, size);
}

void *memalign(size_t align, size_t size) {
    resolve();
    add(C_ALIGNED, 1);
    add(C_BYTES, size);
    return real_memalign(align, size);
}

void *valloc(size_t size) {
    resolve();
    add(C_ALIGNED, 1);
    add(C_BYTES, size);
    return real_valloc(size);
}

void *pvalloc(size_t size) {
    resolve();
    add(C_ALIGNED, 1);
    add(C_BYTES, size);
    return real_pvalloc(size);
}
