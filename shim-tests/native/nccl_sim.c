/* libnccl.so.2 for the simulated engines: an NCCL-like collective library that reaches the
 * driver the way NCCL does with its statically linked CUDA runtime: dlopen("libcuda.so.1"),
 * dlsym("cuGetProcAddress_v2"), then every entry by base name at a cudaVersion. No CUDA symbol
 * is imported dynamically, so culedger sees these calls only through its resolver hooks.
 *
 * ncclCommInitRank allocates, like NCCL 2.19+ with cuMem enabled: per channel and peer one
 * NCCL_BUFFSIZE buffer (default 4 MiB) as cuMemCreate + cuMemAddressReserve + cuMemMap +
 * cuMemSetAccess, and a 2 MiB device work area through cuMemAlloc_v2 (what its static
 * cudaMalloc reaches), plus 1 MiB of pinned host memory (cuMemHostAlloc) for its proxy.
 * Channels: NCCL_MIN_NCHANNELS (default 2). The buffers are not exported (no
 * cuMemExportToShareableHandle): peers are reached through the simulated network.
 * Collectives move no data. Every device range is logged for the ground truth (simtruth.h).
 *
 * ncclMemAlloc (NCCL 2.19+, src/allocator.cc) allocates as NCCL does with cuMem: cuMemCreate +
 * cuMemAddressReserve + cuMemMap + cuMemSetAccess on the current device, rounded up to the
 * granularity; ncclMemFree undoes it. ncclCommWindowRegister (NCCL 2.27+, symmetric memory)
 * registers a range as a window and allocates nothing. SGLang's symmetric-memory pool reaches
 * them through torch's pluggable allocator (pynccl_allocator.py nccl_alloc_plug). */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "simtruth.h"

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4
} ncclResult_t;

typedef struct {
    char internal[128];
} ncclUniqueId;

#define MAX_BUFS 1024

typedef struct {
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle handle;
    int vmm;
} Buf;

typedef struct ncclComm {
    int rank, nranks, dev, nbufs;
    Buf bufs[MAX_BUFS];
    void *host;
} *ncclComm_t;

typedef CUresult (*getproc_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static struct {
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*host_alloc)(void **, size_t, unsigned int);
    CUresult (*host_free)(void *);
} drv;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int drv_ok;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static simtruth_log truth;

static void load_driver(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    getproc_t getproc = h ? (getproc_t)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!getproc) return;
    struct {
        const char *name;
        int version;
        void **slot;
    } entries[] = {
        {"cuCtxGetDevice", 2000, (void **)&drv.ctx_get_device},
        {"cuMemCreate", 10020, (void **)&drv.mem_create},
        {"cuMemAddressReserve", 10020, (void **)&drv.address_reserve},
        {"cuMemMap", 10020, (void **)&drv.map},
        {"cuMemSetAccess", 10020, (void **)&drv.set_access},
        {"cuMemUnmap", 10020, (void **)&drv.unmap},
        {"cuMemRelease", 10020, (void **)&drv.release},
        {"cuMemAddressFree", 10020, (void **)&drv.address_free},
        {"cuMemGetAllocationGranularity", 10020, (void **)&drv.granularity},
        {"cuMemAlloc", 3020, (void **)&drv.mem_alloc},
        {"cuMemFree", 3020, (void **)&drv.mem_free},
        {"cuMemHostAlloc", 2020, (void **)&drv.host_alloc},
        {"cuMemFreeHost", 2000, (void **)&drv.host_free},
    };
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        CUdriverProcAddressQueryResult status;
        if (getproc(entries[i].name, entries[i].slot, entries[i].version, 0, &status) != CUDA_SUCCESS || !*entries[i].slot)
            return;
    }
    drv_ok = 1;
}

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : 0;
    return (v && end && *end == '\0' && n > 0) ? n : dflt;
}

static void note(int kind, int dev, int api, uint64_t base, uint64_t size) {
    simtruth_event e = {kind, dev, 0, api, base, size};
    pthread_mutex_lock(&mu);
    simtruth_push(&truth, e);
    pthread_mutex_unlock(&mu);
}

static ncclResult_t add_vmm(ncclComm_t c, size_t want) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = c->dev;
    size_t gran = 0;
    if (drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || gran == 0) return ncclUnhandledCudaError;
    size_t size = (want + gran - 1) / gran * gran;
    Buf b = {0, size, 0, 1};
    if (drv.mem_create(&b.handle, size, &prop, 0) != CUDA_SUCCESS) return ncclUnhandledCudaError;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, c->dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (drv.address_reserve(&b.va, size, gran, 0, 0) != CUDA_SUCCESS || drv.map(b.va, size, 0, b.handle, 0) != CUDA_SUCCESS ||
        drv.set_access(b.va, size, &access, 1) != CUDA_SUCCESS) {
        drv.release(b.handle);
        return ncclUnhandledCudaError;
    }
    c->bufs[c->nbufs++] = b;
    note(SIMTRUTH_ALLOC, c->dev, SIMTRUTH_API_CU_MEM_CREATE, b.va, size);
    return ncclSuccess;
}

#define MAX_MEM 256
static Buf mem_bufs[MAX_MEM];
static int mem_devs[MAX_MEM];

ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    if (!ptr || size == 0) return ncclInvalidArgument;
    pthread_once(&once, load_driver);
    if (!drv_ok) return ncclSystemError;
    CUdevice dev = 0;
    if (drv.ctx_get_device(&dev) != CUDA_SUCCESS) return ncclUnhandledCudaError;
    struct ncclComm c;
    memset(&c, 0, sizeof c);
    c.dev = (int)dev;
    ncclResult_t rc = add_vmm(&c, size);
    if (rc != ncclSuccess) return rc;
    pthread_mutex_lock(&mu);
    int slot = -1;
    for (int i = 0; i < MAX_MEM && slot < 0; i++)
        if (mem_bufs[i].va == 0) slot = i;
    if (slot >= 0) {
        mem_bufs[slot] = c.bufs[0];
        mem_devs[slot] = c.dev;
    }
    pthread_mutex_unlock(&mu);
    *ptr = (void *)(uintptr_t)c.bufs[0].va;
    return ncclSuccess;
}

ncclResult_t ncclMemFree(void *ptr) {
    if (!ptr) return ncclSuccess;
    pthread_mutex_lock(&mu);
    int slot = -1;
    for (int i = 0; i < MAX_MEM && slot < 0; i++)
        if (mem_bufs[i].va == (CUdeviceptr)(uintptr_t)ptr) slot = i;
    Buf b = slot >= 0 ? mem_bufs[slot] : (Buf){0, 0, 0, 0};
    int dev = slot >= 0 ? mem_devs[slot] : 0;
    if (slot >= 0) mem_bufs[slot].va = 0;
    pthread_mutex_unlock(&mu);
    if (slot < 0) return ncclInvalidArgument;
    drv.unmap(b.va, b.size);
    drv.release(b.handle);
    drv.address_free(b.va, b.size);
    note(SIMTRUTH_FREE, dev, SIMTRUTH_API_CU_MEM_CREATE, b.va, b.size);
    return ncclSuccess;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, void **win, int flags) {
    (void)flags;
    if (!comm || !buff || !size || !win) return ncclInvalidArgument;
    *win = buff;
    return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, void *win) {
    (void)win;
    return comm ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclGetVersion(int *version) {
    if (!version) return ncclInvalidArgument;
    *version = 22703;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "sim-%ld-%ld", (long)getpid(), (long)time(NULL));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    (void)commId;
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    pthread_once(&once, load_driver);
    if (!drv_ok) return ncclSystemError;
    ncclComm_t c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->rank = rank;
    c->nranks = nranks;
    CUdevice dev = 0;
    if (drv.ctx_get_device(&dev) != CUDA_SUCCESS) {
        free(c);
        return ncclUnhandledCudaError;
    }
    c->dev = (int)dev;
    long channels = env_long("NCCL_MIN_NCHANNELS", 2);
    long buffsize = env_long("NCCL_BUFFSIZE", 4L << 20);
    ncclResult_t rc = ncclSuccess;
    for (long ch = 0; ch < channels && rc == ncclSuccess; ch++)
        for (int peer = 0; peer < nranks && rc == ncclSuccess; peer++)
            if (peer != rank && c->nbufs < MAX_BUFS) rc = add_vmm(c, (size_t)buffsize);
    CUdeviceptr work = 0;
    if (rc == ncclSuccess && drv.mem_alloc(&work, 2 << 20) == CUDA_SUCCESS) {
        Buf b = {work, 2 << 20, 0, 0};
        c->bufs[c->nbufs++] = b;
        note(SIMTRUTH_ALLOC, c->dev, SIMTRUTH_API_CU_MEM_ALLOC, work, 2 << 20);
    } else if (rc == ncclSuccess) {
        rc = ncclUnhandledCudaError;
    }
    if (rc == ncclSuccess && drv.host_alloc(&c->host, 1 << 20, 0) != CUDA_SUCCESS) c->host = NULL;
    *comm = c;
    return rc;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    for (int i = 0; i < c->nbufs; i++) {
        Buf *b = &c->bufs[i];
        if (b->vmm) {
            drv.unmap(b->va, b->size);
            drv.release(b->handle);
            drv.address_free(b->va, b->size);
        } else {
            drv.mem_free(b->va);
        }
        note(SIMTRUTH_FREE, c->dev, b->vmm ? SIMTRUTH_API_CU_MEM_CREATE : SIMTRUTH_API_CU_MEM_ALLOC, b->va, b->size);
    }
    if (c->host) drv.host_free(c->host);
    free(c);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, ncclComm_t comm,
                           void *stream) {
    (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)op, (void)stream;
    return comm ? ncclSuccess : ncclInvalidArgument;
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInvalidArgument: return "invalid argument";
    default: return "internal error";
    }
}

int ncclSimDrain(simtruth_event *out, int max) {
    pthread_mutex_lock(&mu);
    int n = simtruth_drain(&truth, out, max);
    pthread_mutex_unlock(&mu);
    return n;
}
