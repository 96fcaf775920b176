/* cumem_allocator.abi3.so for the simulated vLLM: the pluggable allocator of vLLM's sleep mode
 * (csrc/cumem_allocator.cpp: my_malloc -> create_and_map, my_free -> unmap_and_release), which
 * vllm/device_allocator/cumem.py hands to torch.cuda.memory.CUDAPluggableAllocator(lib,
 * "my_malloc", "my_free") for the MemPool of CuMemAllocator.use_memory_pool(tag). Every segment
 * is physical memory from cuMemCreate, mapped at an address reserved with cuMemAddressReserve.
 * Linked against libcuda.so.1 like the real extension. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#define MAX_MAPS 4096

static struct {
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle handle;
} maps[MAX_MAPS];
static int nmaps;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int ensure_context(int device) {
    CUcontext ctx = NULL;
    if (cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) return 1;
    return cuDevicePrimaryCtxRetain(&ctx, device) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

void *my_malloc(ssize_t size, int device, CUstream stream) {
    (void)stream;
    if (size <= 0 || !ensure_context(device)) return NULL;
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    size_t gran = 0;
    if (cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !gran) return NULL;
    size_t sz = ((size_t)size + gran - 1) / gran * gran;
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    if (cuMemAddressReserve(&va, sz, gran, 0, 0) != CUDA_SUCCESS) return NULL;
    if (cuMemCreate(&h, sz, &prop, 0) != CUDA_SUCCESS) {
        cuMemAddressFree(va, sz);
        return NULL;
    }
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (cuMemMap(va, sz, 0, h, 0) != CUDA_SUCCESS || cuMemSetAccess(va, sz, &access, 1) != CUDA_SUCCESS) {
        cuMemRelease(h);
        cuMemAddressFree(va, sz);
        return NULL;
    }
    pthread_mutex_lock(&mu);
    if (nmaps < MAX_MAPS) {
        maps[nmaps].va = va;
        maps[nmaps].size = sz;
        maps[nmaps].handle = h;
        nmaps++;
    }
    pthread_mutex_unlock(&mu);
    return (void *)(uintptr_t)va;
}

void my_free(void *ptr, ssize_t size, int device, CUstream stream) {
    (void)size, (void)device, (void)stream;
    CUdeviceptr va = (CUdeviceptr)(uintptr_t)ptr;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nmaps; i++) {
        if (maps[i].va != va) continue;
        cuMemUnmap(va, maps[i].size);
        cuMemRelease(maps[i].handle);
        cuMemAddressFree(va, maps[i].size);
        maps[i] = maps[--nmaps];
        break;
    }
    pthread_mutex_unlock(&mu);
}
