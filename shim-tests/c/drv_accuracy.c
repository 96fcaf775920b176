/* Ledger accuracy on the driver API (issue [11], items 6-8): VMM lifetimes, the device of
 * stream-ordered allocations, and failed frees. Linked against libcuda.so.1 directly.
 * One mode per behaviour; every mode prints `RESULT key=value` lines with what the driver
 * said (free memory before and after) and what the program knows it holds. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "sim.h"

static CUcontext primary(int ordinal) {
    CUdevice dev;
    CUcontext ctx;
    DRV(cuDeviceGet(&dev, ordinal));
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    return ctx;
}

static CUcontext setup(int ordinal) {
    DRV(cuInit(0));
    CUcontext ctx = primary(ordinal);
    DRV(cuCtxSetCurrent(ctx));
    return ctx;
}

/* Bytes the current device reports as used (total - free): the driver's ground truth. */
static size_t used(void) {
    size_t f = 0, t = 0;
    DRV(cuMemGetInfo(&f, &t));
    return t - f;
}

static CUmemAllocationProp vmm_prop(int ordinal) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    return prop;
}

/* cuda-samples vectorAddMMAP: create, map, release the handle at once; the memory lives
 * until it is unmapped. Three 256 MiB chunks in one reservation; then one is unmapped. */
static int vmm_release_early(void) {
    setup(0);
    size_t base = used();
    CUmemAllocationProp prop = vmm_prop(0);
    const size_t chunk = 256 * MIB;
    CUdeviceptr va;
    DRV(cuMemAddressReserve(&va, 3 * chunk, 0, 0, 0));
    for (int i = 0; i < 3; i++) {
        CUmemGenericAllocationHandle h;
        DRV(cuMemCreate(&h, chunk, &prop, 0));
        DRV(cuMemMap(va + i * chunk, chunk, 0, h, 0));
        DRV(cuMemRelease(h));
    }
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    DRV(cuMemSetAccess(va, 3 * chunk, &acc, 1));
    size_t mapped = used() - base;
    DRV(cuMemUnmap(va + 2 * chunk, chunk));
    size_t after_unmap = used() - base;
    RESULT("mapped=%zu after_unmap=%zu live=%zu peak=%zu", mapped, after_unmap, 2 * chunk, 3 * chunk);
    return 0;
}

/* NCCL's free path (ncclCuMemFree): the allocation handle is not kept, so it is retained
 * from the address, that reference released, the range unmapped, and the creation
 * reference released. The memory is live until the last step. */
static int vmm_retain(void) {
    setup(0);
    size_t base = used();
    CUmemAllocationProp prop = vmm_prop(0);
    const size_t size = 256 * MIB;
    CUmemGenericAllocationHandle h, r;
    CUdeviceptr va;
    DRV(cuMemCreate(&h, size, &prop, 0));
    DRV(cuMemAddressReserve(&va, size, 0, 0, 0));
    DRV(cuMemMap(va, size, 0, h, 0));
    DRV(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + 4096)));
    EXPECT(r == h);
    DRV(cuMemRelease(r));
    size_t after_retain_release = used() - base; /* probe 2: still live */
    DRV(cuMemUnmap(va, size));
    size_t after_unmap = used() - base; /* probe 3: still live (creation reference) */
    DRV(cuMemRelease(h));
    size_t after_release = used() - base; /* probe 4: gone */
    DRV(cuMemAddressFree(va, size));
    RESULT("after_retain_release=%zu after_unmap=%zu after_release=%zu size=%zu", after_retain_release, after_unmap,
           after_release, size);
    return 0;
}

/* Stream-ordered allocations with device 0 current, on device 1's stream and pools (its
 * default pool, one made on it, one culedger never saw), and a capture on device 1's stream
 * while device 0 allocates. Nothing may be charged to device 0 except what device 0's own
 * streams and synchronous calls allocate. */
static int async_devices(void) {
    setup(0);
    CUcontext c0 = primary(0), c1 = primary(1);
    CUstream s1;
    DRV(cuCtxSetCurrent(c1));
    DRV(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    DRV(cuCtxSetCurrent(c0));
    size_t used0 = used();
    CUdeviceptr a, b, c, d, e, f, g;
    DRV(cuMemAllocAsync(&a, 256 * MIB, s1));
    /* A pool culedger never saw created or looked up: the pool of `a`, from its attribute. */
    CUmemoryPool unseen;
    DRV(cuPointerGetAttribute(&unseen, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a));
    DRV(cuMemAllocFromPoolAsync(&g, 4 * MIB, unseen, CU_STREAM_LEGACY));
    CUmemoryPool pool1;
    DRV(cuDeviceGetDefaultMemPool(&pool1, 1));
    DRV(cuMemAllocFromPoolAsync(&b, 128 * MIB, pool1, CU_STREAM_LEGACY));
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 1;
    CUmemoryPool made;
    DRV(cuMemPoolCreate(&made, &props));
    DRV(cuMemAllocFromPoolAsync(&c, 64 * MIB, made, CU_STREAM_PER_THREAD));
    DRV(cuMemAllocAsync(&d, 32 * MIB, CU_STREAM_PER_THREAD)); /* device 0: the current one */
    DRV(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_RELAXED));
    DRV(cuMemAllocAsync(&e, 16 * MIB, s1)); /* captured, device 1 */
    DRV(cuMemAlloc(&f, 8 * MIB));           /* device 0, not part of the capture */
    CUgraph graph;
    DRV(cuStreamEndCapture(s1, &graph));
    size_t dev0 = used() - used0;
    RESULT("dev0=%zu dev1=%zu dev1_graphs=%zu dev0_measured=%zu", 40 * MIB, 468 * MIB, 16 * MIB, dev0);
    return 0;
}

struct failing_free {
    CUdeviceptr ptr;
    CUresult rc;
};

static void *free_without_context(void *arg) {
    struct failing_free *f = arg;
    f->rc = cuMemFree(f->ptr); /* this thread has no current context: 201 */
    return NULL;
}

/* A free that fails (no context on the calling thread) leaves the allocation exactly as it
 * was: still exported (ipc), counted once when exported again, never freed. */
static int free_fails(void) {
    setup(0);
    CUdeviceptr a, b;
    DRV(cuMemAlloc(&a, 64 * MIB));
    DRV(cuMemAlloc(&b, 16 * MIB));
    CUipcMemHandle ipc;
    DRV(cuIpcGetMemHandle(&ipc, a));
    struct failing_free arg = {.ptr = a, .rc = CUDA_SUCCESS};
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, free_without_context, &arg) == 0);
    EXPECT(pthread_join(t, NULL) == 0);
    DRV(cuIpcGetMemHandle(&ipc, a)); /* exported again: still one exported buffer */
    DRV(cuMemFree(b));
    RESULT("free_rc=%d live=%zu ipc=%zu frees=1 allocs=2", (int)arg.rc, 64 * MIB, 64 * MIB);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "vmm_release_early")) return vmm_release_early();
    if (!strcmp(mode, "vmm_retain")) return vmm_retain();
    if (!strcmp(mode, "async_devices")) return async_devices();
    if (!strcmp(mode, "free_fails")) return free_fails();
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
