/* mincuda: a minimal-cost CUDA driver (`libcuda.so.1`) for measuring culedger's own cost.
 *
 * Every call costs a few nanoseconds: an allocation is one atomic add on the device's next
 * address and one on its allocated bytes, a free is a NULL check, the current context is a
 * thread-local. Nothing is tracked per allocation, so a program over this driver pays only
 * for its runtime and for whatever interposer is preloaded. Not a simulator: no strictness,
 * no shared machine, the memory is never dereferenceable (see shim-tests/README.md, "Minimal
 * driver"). The fake runtime (`libcudart.so.12`, shim-tests/fakecudart) runs over it, and so
 * does the static-runtime bench workload.
 *
 * Exactly what the runtime path needs: `cuGetProcAddress_v2` (looked up with dlsym, then
 * every entry by base name, cudaVersion and flags, as the real driver resolves them), and the
 * entries the fake runtime and culedger's bookkeeping call. Unknown names: CUDA_ERROR_NOT_FOUND.
 *
 * Bad-driver switches (for the bad-input tests):
 * - built with -DMINCUDA_SPARSE, only `cuGetProcAddress_v2` and `cuInit` are exported (every
 *   other entry is reachable only through the resolver);
 * - built with -DMINCUDA_NO_RESOLVER, everything but `cuGetProcAddress_v2` is exported (a driver
 *   older than CUDA 11.3, which has no resolver);
 * - MINCUDA_HIDE=name,name,... : the resolver answers CUDA_ERROR_NOT_FOUND for these base names
 *   (read once, at the first resolution), as a driver that lacks them would.
 * - MINCUDA_REUSE=1 (read by cuInit): a free of a device's most recent allocation gives its
 *   range back, so the next allocation gets the same address (as a driver or a caching
 *   allocator reusing a freed block); otherwise addresses only grow. */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef MINCUDA_SPARSE
#define EXPORT __attribute__((visibility("hidden")))
#else
#define EXPORT __attribute__((visibility("default")))
#endif
#define ALWAYS __attribute__((visibility("default")))
#ifdef MINCUDA_NO_RESOLVER
#define RESOLVER __attribute__((visibility("hidden")))
#else
#define RESOLVER ALWAYS
#endif

#define MAX_DEVICES 16
#define NUM_DEVICES 8
#define TOTAL_BYTES (96ull << 30)
#define DEVICE_BASE 0x700000000000ull
#define DEVICE_SPAN (1ull << 39)

struct ctx {
    int device;
};
static struct ctx contexts[MAX_DEVICES];
static _Atomic uint64_t next_addr[MAX_DEVICES];
static _Atomic uint64_t allocated[MAX_DEVICES];
static _Atomic int initialized;
static int reuse;                              /* MINCUDA_REUSE */
static _Atomic uint64_t top_base[MAX_DEVICES]; /* the most recent allocation, for MINCUDA_REUSE */
static __thread struct ctx *current;

/* ---- entry points --------------------------------------------------------------------------- */

ALWAYS CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    for (int d = 0; d < MAX_DEVICES; d++) {
        contexts[d].device = d;
        uint64_t zero = 0;
        atomic_compare_exchange_strong(&next_addr[d], &zero, DEVICE_BASE + (uint64_t)d * DEVICE_SPAN + 0x200000);
    }
    const char *r = getenv("MINCUDA_REUSE");
    reuse = r && r[0] == '1';
    atomic_store(&initialized, 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 12090;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = NUM_DEVICES;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= NUM_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= NUM_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = TOTAL_BYTES;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!atomic_load_explicit(&initialized, memory_order_relaxed)) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= NUM_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    *pctx = (CUcontext)&contexts[dev];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    if (dev < 0 || dev >= NUM_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
    current = (struct ctx *)ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx) {
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = (CUcontext)current;
    return CUDA_SUCCESS;
}

/* Libraries and kernels (the launch benchmark): a library is a number, its kernels the
 * library's number times 4096 plus a hash of the name; a launch checks nothing. */
static _Atomic uint64_t next_library = 1;

EXPORT CUresult cuLibraryLoadData(CUlibrary *lib, const void *code, CUjit_option *jo, void **jv, unsigned int nj,
                                  CUlibraryOption *lo, void **lv, unsigned int nl) {
    (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    if (!lib || !code) return CUDA_ERROR_INVALID_VALUE;
    *lib = (CUlibrary)(uintptr_t)atomic_fetch_add(&next_library, 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLibraryGetKernel(CUkernel *k, CUlibrary lib, const char *name) {
    if (!k || !name) return CUDA_ERROR_INVALID_VALUE;
    uint64_t h = 5381;
    for (const char *c = name; *c; c++) h = h * 33 + (unsigned char)*c;
    *k = (CUkernel)(uintptr_t)(((uint64_t)(uintptr_t)lib << 12) | (h & 0xfff) | 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                               unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params,
                               void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)s, (void)params, (void)extra;
    return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *dev) {
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = current->device;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) { return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

/* 512-byte granularity; addresses are never reused (the span per device is 512 GiB). Only a
 * request larger than the device fails. */
EXPORT CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) {
    if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (bytes > TOTAL_BYTES) return CUDA_ERROR_OUT_OF_MEMORY;
    struct ctx *c = current;
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t rounded = (bytes + 511) & ~(uint64_t)511;
    *p = atomic_fetch_add_explicit(&next_addr[c->device], rounded, memory_order_relaxed);
    atomic_fetch_add_explicit(&allocated[c->device], rounded, memory_order_relaxed);
    if (reuse) atomic_store_explicit(&top_base[c->device], *p, memory_order_relaxed);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree(CUdeviceptr p) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    if (reuse) {
        int d = current->device;
        uint64_t top = p;
        if (atomic_compare_exchange_strong(&top_base[d], &top, 0)) atomic_store(&next_addr[d], p);
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream s) {
    (void)s;
    return cuMemAlloc(p, bytes);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t bytes, CUstream s) { return cuMemAllocAsync(p, bytes, s); }

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    (void)s;
    return cuMemFree(p);
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

/* Free is total minus every byte ever allocated on the device (frees are not subtracted: the
 * driver keeps no map), never below zero. */
EXPORT CUresult cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    if (!free_bytes && !total_bytes) return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = current;
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t used = atomic_load_explicit(&allocated[c->device], memory_order_relaxed);
    if (free_bytes) *free_bytes = used < TOTAL_BYTES ? TOTAL_BYTES - used : 0;
    if (total_bytes) *total_bytes = TOTAL_BYTES;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    (void)base, (void)size, (void)p;
    return CUDA_ERROR_NOT_FOUND;
}

/* Copies move nothing: device memory is not real. */
EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
    (void)n;
    return dst && src ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) { return cuMemcpyHtoD(dst, src, n); }
EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    (void)s;
    return cuMemcpyHtoD(dst, src, n);
}
EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    return cuMemcpyHtoDAsync(dst, src, n, s);
}
EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
    (void)n;
    return dst && src ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoH(dst, src, n); }
EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    (void)n;
    return dst && src ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cuMemcpy(dst, src, n); }
EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    (void)s;
    return cuMemcpy(dst, src, n);
}
EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    return cuMemcpyAsync(dst, src, n, s);
}

/* Any non-NULL pointer gets a handle of zeros (nothing is tracked to check it against). */
EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    if (!h || !p) return CUDA_ERROR_INVALID_VALUE;
    memset(h, 0, sizeof *h);
    return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuStreamSynchronize(CUstream s) {
    (void)s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(s); }

/* ---- resolution ------------------------------------------------------------------------------ */

struct row {
    const char *base;
    int version;    /* cudaVersion in which this ABI variant was introduced (PFN_<base>_v<version>) */
    int per_thread; /* a _ptsz/_ptds variant */
    void *fn;
};

RESOLVER CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                   CUdriverProcAddressQueryResult *status);

static const struct row TABLE[] = {
    {"cuInit", 2000, 0, (void *)cuInit},
    {"cuDriverGetVersion", 2020, 0, (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", 2000, 0, (void *)cuDeviceGetCount},
    {"cuDeviceGet", 2000, 0, (void *)cuDeviceGet},
    {"cuDeviceTotalMem", 3020, 0, (void *)cuDeviceTotalMem},
    {"cuDevicePrimaryCtxRetain", 7000, 0, (void *)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", 11000, 0, (void *)cuDevicePrimaryCtxRelease},
    {"cuCtxSetCurrent", 4000, 0, (void *)cuCtxSetCurrent},
    {"cuCtxGetDevice", 2000, 0, (void *)cuCtxGetDevice},
    {"cuCtxGetCurrent", 4000, 0, (void *)cuCtxGetCurrent},
    {"cuLibraryLoadData", 12000, 0, (void *)cuLibraryLoadData},
    {"cuLibraryGetKernel", 12000, 0, (void *)cuLibraryGetKernel},
    {"cuLaunchKernel", 4000, 0, (void *)cuLaunchKernel},
    {"cuCtxSynchronize", 2000, 0, (void *)cuCtxSynchronize},
    {"cuMemAlloc", 3020, 0, (void *)cuMemAlloc},
    {"cuMemFree", 3020, 0, (void *)cuMemFree},
    {"cuMemAllocAsync", 11020, 0, (void *)cuMemAllocAsync},
    {"cuMemAllocAsync", 11020, 1, (void *)cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync},
    {"cuMemFreeAsync", 11020, 1, (void *)cuMemFreeAsync_ptsz},
    {"cuMemGetInfo", 3020, 0, (void *)cuMemGetInfo},
    {"cuMemGetAddressRange", 3020, 0, (void *)cuMemGetAddressRange},
    {"cuMemcpyHtoD", 3020, 0, (void *)cuMemcpyHtoD},
    {"cuMemcpyHtoD", 7000, 1, (void *)cuMemcpyHtoD_v2_ptds},
    {"cuMemcpyHtoDAsync", 3020, 0, (void *)cuMemcpyHtoDAsync},
    {"cuMemcpyHtoDAsync", 7000, 1, (void *)cuMemcpyHtoDAsync_v2_ptsz},
    {"cuMemcpyDtoH", 3020, 0, (void *)cuMemcpyDtoH},
    {"cuMemcpyDtoH", 7000, 1, (void *)cuMemcpyDtoH_v2_ptds},
    {"cuMemcpy", 4000, 0, (void *)cuMemcpy},
    {"cuMemcpy", 7000, 1, (void *)cuMemcpy_ptds},
    {"cuMemcpyAsync", 4000, 0, (void *)cuMemcpyAsync},
    {"cuMemcpyAsync", 7000, 1, (void *)cuMemcpyAsync_ptsz},
    {"cuIpcGetMemHandle", 4010, 0, (void *)cuIpcGetMemHandle},
    {"cuStreamSynchronize", 2000, 0, (void *)cuStreamSynchronize},
    {"cuStreamSynchronize", 7000, 1, (void *)cuStreamSynchronize_ptsz},
    {"cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress},
};
#define NROWS (sizeof TABLE / sizeof TABLE[0])

static char *hidden;               /* MINCUDA_HIDE, with a comma at each end */
static pthread_once_t hide_once = PTHREAD_ONCE_INIT;

static void read_hide(void) {
    const char *h = getenv("MINCUDA_HIDE");
    if (!h || !*h) return;
    size_t n = strlen(h);
    char *s = malloc(n + 3);
    if (!s) return;
    s[0] = ',';
    memcpy(s + 1, h, n);
    s[n + 1] = ',';
    s[n + 2] = 0;
    hidden = s;
}

static int is_hidden(const char *base) {
    pthread_once(&hide_once, read_hide);
    if (!hidden) return 0;
    size_t n = strlen(base);
    for (const char *p = strstr(hidden, base); p; p = strstr(p + 1, base))
        if (p[-1] == ',' && p[n] == ',') return 1;
    return 0;
}

/* The newest variant introduced at or before `version`; the per-thread one with flags 2. */
RESOLVER CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                   CUdriverProcAddressQueryResult *status) {
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (flags > 2) return CUDA_ERROR_INVALID_VALUE;
    const struct row *best = NULL;
    int first = 0;
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *r = &TABLE[i];
        if (strcmp(r->base, symbol) != 0) continue;
        if (!first || r->version < first) first = r->version;
        if (r->version > version || (r->per_thread && flags != 2)) continue;
        if (!best || r->version > best->version || (r->version == best->version && r->per_thread)) best = r;
    }
    if (!best || is_hidden(symbol)) {
        if (status && first && !is_hidden(symbol)) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = best->fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}
