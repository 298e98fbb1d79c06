/*
 * A test double for NVIDIA's management library (libnvidia-ml.so.1), for machines without
 * a GPU. It implements only the calls Nereid's GPU metrics make, with made-up GPUs whose
 * readings are fixed functions of the device index, so a test can check each value that
 * reaches /metrics. The tests load it through NEREID_NVML_LIBRARY; it proves nothing
 * about a real GPU, which needs the device machine (scripts/gpu_check.sh).
 *
 * FAKE_NVML_DEVICES: number of GPUs (default 2). FAKE_NVML_INIT_FAILS: nvmlInit fails.
 * Device i reports: UUID "GPU-fake-000i", utilization (37 + i) %, 80 GiB total and
 * (i + 1) GiB used (version 2 of the memory call, which needs its struct version; version 1
 * adds the 512 MiB the driver reserves, as real drivers do), power 71.234 W (device 1: NVML_ERROR_NOT_SUPPORTED), limit 700 W,
 * and an energy total that grows by 1000 mJ per read.
 */
#include <stdio.h>
#include <stdlib.h>

typedef int nvmlReturn_t;
typedef struct { int index; } *nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
#define MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
#define RESERVED (512ULL << 20)

enum {
    SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
    ARGUMENT_VERSION_MISMATCH = 25, UNKNOWN = 999
};

#define MAX_DEVICES 8
static struct { int index; } devices[MAX_DEVICES];
static int initialized;
static unsigned long long energy[MAX_DEVICES];

static int device_count(void) {
    const char *set = getenv("FAKE_NVML_DEVICES");
    int n = set ? atoi(set) : 2;
    return n < 0 ? 0 : (n > MAX_DEVICES ? MAX_DEVICES : n);
}

nvmlReturn_t nvmlInit_v2(void) {
    if (getenv("FAKE_NVML_INIT_FAILS")) return UNKNOWN;
    for (int i = 0; i < MAX_DEVICES; i++) devices[i].index = i;
    initialized = 1;
    return SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) { initialized = 0; return SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t status) {
    switch (status) {
    case UNINITIALIZED: return "Uninitialized";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return UNINITIALIZED;
    if (!count) return INVALID_ARGUMENT;
    *count = (unsigned int)device_count();
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return UNINITIALIZED;
    if (!device || index >= (unsigned int)device_count()) return INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&devices[index];
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (!device || !uuid) return INVALID_ARGUMENT;
    snprintf(uuid, length, "GPU-fake-%04d", device->index);
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    if (!device || !u) return INVALID_ARGUMENT;
    u->gpu = 37 + device->index;
    u->memory = 5;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    if (!device || !m) return INVALID_ARGUMENT;
    m->total = 80ULL << 30;
    m->used = ((unsigned long long)(device->index + 1) << 30) + RESERVED;
    m->free = m->total - m->used;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    if (!device || !m) return INVALID_ARGUMENT;
    if (m->version != MEMORY_V2) return ARGUMENT_VERSION_MISMATCH;
    m->total = 80ULL << 30;
    m->reserved = RESERVED;
    m->used = (unsigned long long)(device->index + 1) << 30;
    m->free = m->total - m->reserved - m->used;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *mw) {
    if (!device || !mw) return INVALID_ARGUMENT;
    if (device->index == 1) return NOT_SUPPORTED;
    *mw = 71234;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *mw) {
    if (!device || !mw) return INVALID_ARGUMENT;
    *mw = 700000;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *mj) {
    if (!device || !mj) return INVALID_ARGUMENT;
    energy[device->index] += 1000;
    *mj = 5000000 + energy[device->index];
    return SUCCESS;
}
