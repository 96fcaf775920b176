/* cuMemHostGetDevicePointer against CUDA 13.5's cuda.h (cuMemHostGetDevicePointer_v2), as NCCL's
 * shared-memory transport (cudaHostRegister(..., Mapped) then cudaHostGetDevicePointer) and
 * vLLM's V2 model runner use it: allocated pinned memory (mapped on a device with unified
 * addressing, flags or not), registered memory with and without CU_MEMHOSTREGISTER_DEVICEMAP,
 * pageable memory, non-zero flags, a freed allocation. Prints RESULT lines. */
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>

#include "sim.h"

#if CUDA_VERSION < 13000
#error "compile against the CUDA 13 headers (target/cuda13/<version>/include)"
#endif

int main(void) {
    DRV(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    DRV(cuDeviceGet(&dev, 0));
    CUdeviceptr d = 0;
    char *pageable = malloc(1 << 20);
    int no_context = (int)cuMemHostGetDevicePointer(&d, pageable, 0);
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    DRV(cuCtxSetCurrent(ctx));
    int can_use_host_pointer = -1;
    DRV(cuDeviceGetAttribute(&can_use_host_pointer, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev));

    void *pinned;
    DRV(cuMemHostAlloc(&pinned, 1 << 20, 0));
    DRV(cuMemHostGetDevicePointer(&d, pinned, 0));
    int allocated_same = d == (CUdeviceptr)(uintptr_t)pinned;
    DRV(cuMemHostGetDevicePointer(&d, (char *)pinned + 4096, 0));
    int interior_same = d == (CUdeviceptr)(uintptr_t)pinned + 4096;
    int flags = (int)cuMemHostGetDevicePointer(&d, pinned, 1);
    int null_out = (int)cuMemHostGetDevicePointer(NULL, pinned, 0);

    char *mapped = aligned_alloc(4096, 1 << 20), *plain = aligned_alloc(4096, 1 << 20);
    DRV(cuMemHostRegister(mapped, 1 << 20, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    DRV(cuMemHostRegister(plain, 1 << 20, 0));
    DRV(cuMemHostGetDevicePointer(&d, mapped, 0));
    int registered_same = d == (CUdeviceptr)(uintptr_t)mapped;
    int registered_unmapped = (int)cuMemHostGetDevicePointer(&d, plain, 0);
    int not_pinned = (int)cuMemHostGetDevicePointer(&d, pageable, 0);
    DRV(cuMemHostUnregister(mapped));
    int unregistered = (int)cuMemHostGetDevicePointer(&d, mapped, 0);
    DRV(cuMemFreeHost(pinned));
    int freed = (int)cuMemHostGetDevicePointer(&d, pinned, 0);
    RESULT("no_context=%d can_use_host_pointer=%d allocated_same=%d interior_same=%d flags=%d null_out=%d",
           no_context, can_use_host_pointer, allocated_same, interior_same, flags, null_out);
    RESULT("registered_same=%d registered_unmapped=%d not_pinned=%d unregistered=%d freed=%d", registered_same,
           registered_unmapped, not_pinned, unregistered, freed);
    DRV(cuMemHostUnregister(plain));
    return 0;
}
