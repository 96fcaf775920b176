/* Driver API directly: init, primary context, cuMemAlloc (the macro gives cuMemAlloc_v2),
 * cuMemGetInfo, VMM create/reserve/map/unmap/release, cuGetProcAddress.
 * RESULT keys: devices alloc_delta vmm_granularity vmm_map_delta vmm_unmapped_delta vmm_bad_size_error
 *              vmm_released_delta getproc_v2_matches getproc_v1_differs getproc_empty_error
 *              getproc_empty_status getproc_old_status */
#include <stdint.h>
#include <cuda.h>
#include "sim.h"

static size_t free_bytes(void) {
    size_t f = 0, t = 0;
    DRV(cuMemGetInfo(&f, &t));
    return f;
}

int main(void) {
    DRV(cuInit(0));
    int n = 0;
    DRV(cuDeviceGetCount(&n));
    CUdevice dev;
    DRV(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    DRV(cuCtxSetCurrent(ctx));
    RESULT("devices=%d", n);

    size_t f0 = free_bytes();
    CUdeviceptr p = 0;
    DRV(cuMemAlloc(&p, 10 * MIB));
    RESULT("alloc_delta=%zu", f0 - free_bytes());
    DRV(cuMemFree(p));

    /* VMM, the way PyTorch's expandable segments and NCCL's cuMem allocator do it. */
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    DRV(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    RESULT("vmm_granularity=%zu", gran);
    size_t size = 2 * gran;
    CUmemGenericAllocationHandle h;
    f0 = free_bytes();
    CUmemGenericAllocationHandle bad;
    RESULT("vmm_bad_size_error=%d", (int)cuMemCreate(&bad, gran + 1, &prop, 0));
    DRV(cuMemCreate(&h, size, &prop, 0));
    CUdeviceptr va = 0;
    DRV(cuMemAddressReserve(&va, 2 * size, 0, 0, 0));
    DRV(cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc access = {0};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(cuMemSetAccess(va, size, &access, 1));
    RESULT("vmm_map_delta=%zu", f0 - free_bytes());
    DRV(cuMemUnmap(va, size));
    RESULT("vmm_unmapped_delta=%zu", f0 - free_bytes());
    DRV(cuMemRelease(h));
    DRV(cuMemAddressFree(va, 2 * size));
    RESULT("vmm_released_delta=%zu", f0 - free_bytes());

    /* cuGetProcAddress is cuGetProcAddress_v2 in 12.x headers: base name + version. */
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    DRV(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    RESULT("getproc_v2_matches=%d", fn == (void *)&cuMemAlloc_v2 && st == CU_GET_PROC_ADDRESS_SUCCESS);
    void *fn1 = NULL;
    DRV(cuGetProcAddress("cuMemAlloc", &fn1, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    RESULT("getproc_v1_differs=%d", fn1 != NULL && fn1 != fn);
    CUresult r = cuGetProcAddress("", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    RESULT("getproc_empty_error=%d getproc_empty_status=%d", (int)r, (int)st);
    r = cuGetProcAddress("cuMemCreate", &fn, 10000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    RESULT("getproc_old_error=%d getproc_old_status=%d", (int)r, (int)st);

    DRV(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
