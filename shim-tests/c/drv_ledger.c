/* Driver-API scenario for the interposer's tests (linked against libcuda.so.1 directly,
 * the way a C++ binary or PyTorch's driver table reaches it). Prints RESULT lines. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024ull * 1024ull)
#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult r_ = (call);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                     \
            fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #call, (int)r_);  \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static CUcontext setup(int ordinal) {
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, ordinal));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    return ctx;
}

static int basic(void) {
    setup(0);
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, 6 * MiB));
    CHECK(cuMemAlloc(&b, 2 * MiB));
    size_t f = 0, t = 0;
    CHECK(cuMemGetInfo(&f, &t));
    CHECK(cuMemGetInfo(NULL, &t)); /* legal: only the total */
    static char host[4096];
    CHECK(cuMemcpyHtoD(a, host, sizeof host));
    CHECK(cuMemFree(b));
    CUresult bad = cuMemFree(b); /* double free: the driver's error, forwarded */
    printf("RESULT live=%llu double_free=%d probe_free=%zu probe_total=%zu h2d=%zu\n", 6 * MiB, (int)bad, f, t,
           sizeof host);
    return 0;
}

static int vmm(void) {
    setup(1);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 1;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t sz = 2 * gran;
    CUmemGenericAllocationHandle h1, h2;
    CHECK(cuMemCreate(&h1, sz, &prop, 0));
    CHECK(cuMemCreate(&h2, sz, &prop, 0));
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 2 * sz, 0, 0, 0));
    CHECK(cuMemMap(va, sz, 0, h1, 0));
    CHECK(cuMemMap(va + sz, sz, 0, h2, 0));
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(cuMemSetAccess(va, 2 * sz, &acc, 1));
    int fd = -1;
    CHECK(cuMemExportToShareableHandle(&fd, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(cuMemUnmap(va + sz, sz));
    CHECK(cuMemRelease(h2));
    printf("RESULT vmm_live=%zu vmm_exported=%zu vmm_peak=%zu\n", sz, sz, 2 * sz);
    return 0;
}

/* A pitched allocation is accounted as pitch x height, the pitch the driver chose. */
static int pitch(void) {
    setup(0);
    CUdeviceptr p;
    size_t pitch = 0;
    CHECK(cuMemAllocPitch(&p, &pitch, 1000, 3, 4));
    printf("RESULT live=%zu pitch=%zu\n", pitch * 3, pitch);
    return 0;
}

/* The other driver families: managed, pinned host, pool, module load (hidden cost),
 * capture with a stream-ordered allocation, instantiation (hidden cost). */
static int misc(void) {
    setup(0);
    CUdeviceptr m, a, c;
    CHECK(cuMemAllocManaged(&m, 2 * MiB, CU_MEM_ATTACH_GLOBAL));
    void *h = NULL, *h2 = NULL;
    CHECK(cuMemHostAlloc(&h, 3 * MiB, 0));
    CHECK(cuMemAllocHost(&h2, 1 * MiB));
    CHECK(cuMemFreeHost(h2));
    CUmemoryPool pool;
    CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAllocFromPoolAsync(&a, 4 * MiB, pool, s));
    CUmodule mod;
    static const char image[] = "a module image";
    CHECK(cuModuleLoadData(&mod, image));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemAllocAsync(&c, 6 * MiB, s));
    CUgraph g;
    CHECK(cuStreamEndCapture(s, &g));
    CUgraphExec e;
    CHECK(cuGraphInstantiate(&e, g, 0));
    printf("RESULT live=%llu captured=%llu pinned=%llu pinned_peak=%llu\n", 12 * MiB, 6 * MiB, 3 * MiB, 4 * MiB);
    return 0;
}

typedef CUresult (*alloc_v2_t)(CUdeviceptr *, size_t);
typedef CUresult (*alloc_v1_t)(unsigned int *, unsigned int);
typedef CUresult (*free_v1_t)(unsigned int);

static int getproc(void) {
    setup(0);
    CUdriverProcAddressQueryResult st;
    void *fn = NULL;
    CHECK(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CUdeviceptr p;
    CHECK(((alloc_v2_t)fn)(&p, 5 * MiB));
    /* Below 3020 the driver hands out the v1 ABI (32-bit sizes): never wrapped. */
    void *v1 = NULL;
    CHECK(cuGetProcAddress("cuMemAlloc", &v1, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    unsigned int p32 = 0;
    CUresult r1 = ((alloc_v1_t)v1)(&p32, 1u << 20);
    printf("RESULT live=%llu v1_rc=%d v1_distinct=%d\n", 5 * MiB, (int)r1, v1 != fn);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    if (!strcmp(mode, "basic")) return basic();
    if (!strcmp(mode, "vmm")) return vmm();
    if (!strcmp(mode, "getproc")) return getproc();
    if (!strcmp(mode, "pitch")) return pitch();
    if (!strcmp(mode, "misc")) return misc();
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
