/*
 * A test double for the CUDA driver library (libcuda.so.1), for machines without a GPU.
 * It implements only the driver calls Nereid's CUDA shared-memory registry makes, with
 * "device memory" that is really a POSIX shared-memory object: the 64-byte IPC handle
 * carries the object's name, NUL-terminated. The tests load it through
 * NEREID_CUDA_LIBRARY so the registry's real code path (handle → open → bounds check →
 * device-to-host and host-to-device copies → close) runs end to end; it proves nothing
 * about a real GPU, which needs the device machine.
 *
 * cuMemAlloc hands out host memory (calloc) as "device memory" of the current device, so
 * a test backend may read back what it wrote.
 *
 * FAKE_CUDA_DEVICES sets the number of devices (default 1); FAKE_CUDA_MEMORY, when set,
 * the most bytes one cuMemAlloc may take (more is CUDA_ERROR_OUT_OF_MEMORY).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_DEVICE = 101, INVALID_HANDLE = 400 };

#define MAX_OPEN 64
static struct { CUdeviceptr base; size_t size; } opened[MAX_OPEN];

CUresult cuInit(unsigned flags) { (void)flags; return OK; }

CUresult cuGetErrorString(CUresult status, const char **text) {
    switch (status) {
    case INVALID_VALUE: *text = "invalid argument"; return OK;
    case OUT_OF_MEMORY: *text = "out of memory"; return OK;
    case INVALID_DEVICE: *text = "invalid device ordinal"; return OK;
    case INVALID_HANDLE: *text = "invalid resource handle"; return OK;
    default: *text = NULL; return INVALID_VALUE;
    }
}

CUresult cuDeviceGetCount(int *count) {
    const char *env = getenv("FAKE_CUDA_DEVICES");
    *count = env ? atoi(env) : 1;
    return OK;
}

CUresult cuDeviceGet(int *device, int ordinal) {
    int count;
    cuDeviceGetCount(&count);
    if (ordinal < 0 || ordinal >= count) return INVALID_DEVICE;
    *device = ordinal;
    return OK;
}

/* GPU-<device as 8 hex digits>-0000-4000-8000-fa4ecda00000: distinct per device. */
CUresult cuDeviceGetUuid_v2(unsigned char uuid[16], int device) {
    memset(uuid, 0, 16);
    uuid[0] = (unsigned char)(device >> 24);
    uuid[1] = (unsigned char)(device >> 16);
    uuid[2] = (unsigned char)(device >> 8);
    uuid[3] = (unsigned char)device;
    uuid[6] = 0x40;
    uuid[8] = 0x80;
    uuid[10] = 0xfa; uuid[11] = 0x4e; uuid[12] = 0xcd; uuid[13] = 0xa0;
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
    *context = (void *)(uintptr_t)(device + 1);
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device) { (void)device; return OK; }

static __thread void *current_context;

CUresult cuCtxSetCurrent(void *context) { current_context = context; return OK; }

CUresult cuCtxGetCurrent(void **context) { *context = current_context; return OK; }

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *ptr, CUipcMemHandle handle, unsigned flags) {
    (void)flags;
    char name[65];
    memcpy(name, handle.reserved, 64);
    name[64] = '\0';
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return INVALID_HANDLE;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0) { close(fd); return INVALID_HANDLE; }
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return INVALID_HANDLE;
    for (int i = 0; i < MAX_OPEN; i++) {
        if (opened[i].base == 0) {
            opened[i].base = (CUdeviceptr)(uintptr_t)base;
            opened[i].size = (size_t)st.st_size;
            *ptr = opened[i].base;
            return OK;
        }
    }
    munmap(base, (size_t)st.st_size);
    return INVALID_VALUE;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
    for (int i = 0; i < MAX_OPEN; i++) {
        if (opened[i].base == ptr) {
            munmap((void *)(uintptr_t)ptr, opened[i].size);
            opened[i].base = 0;
            return OK;
        }
    }
    return INVALID_VALUE;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
    for (int i = 0; i < MAX_OPEN; i++) {
        if (opened[i].base && ptr >= opened[i].base && ptr < opened[i].base + opened[i].size) {
            *base = opened[i].base;
            *size = opened[i].size;
            return OK;
        }
    }
    return INVALID_VALUE;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return OK;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    memcpy((void *)(uintptr_t)dst, src, n);
    return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t n) {
    const char *limit = getenv("FAKE_CUDA_MEMORY");
    if (n == 0) return INVALID_VALUE;
    if (limit && n > strtoull(limit, NULL, 10)) return OUT_OF_MEMORY;
    void *memory = calloc(1, n);
    if (!memory) return OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)memory;
    return OK;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
    free((void *)(uintptr_t)ptr);
    return OK;
}
