/* cuTensorMapEncodeTiled, linked directly as vLLM's _C_stable_libtorch.abi3.so links it, against
 * CUDA 13.5's cuda.h: before cuInit, without a context, a Hopper GEMM operand's descriptor (bf16,
 * 64 x 128 box, 128-byte swizzle) encoded twice, and one documented limit broken at a time.
 * Prints RESULT lines: the CUresult of each call. */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "sim.h"

#if CUDA_VERSION < 13000
#error "compile against the CUDA 13 headers (target/cuda13/<version>/include)"
#endif

struct args {
    CUtensorMapDataType type;
    cuuint32_t rank;
    void *address;
    cuuint64_t dims[5], strides[4];
    cuuint32_t box[5], element_strides[5];
    CUtensorMapInterleave interleave;
    CUtensorMapSwizzle swizzle;
};

static struct args operand(CUdeviceptr base) {
    struct args a = {
        .type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        .rank = 2,
        .address = (void *)(uintptr_t)base,
        .dims = {4096, 1024},
        .strides = {4096 * 2},
        .box = {64, 128},
        .element_strides = {1, 1},
        .interleave = CU_TENSOR_MAP_INTERLEAVE_NONE,
        .swizzle = CU_TENSOR_MAP_SWIZZLE_128B,
    };
    return a;
}

static int encode(CUtensorMap *map, const struct args *a) {
    return (int)cuTensorMapEncodeTiled(map, a->type, a->rank, a->address, a->dims, a->strides, a->box,
                                       a->element_strides, a->interleave, a->swizzle,
                                       CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int main(void) {
    static CUtensorMap maps[3];
    struct args a = operand(0x10000);
    int before_init = encode(&maps[0], &a);
    DRV(cuInit(0));
    int no_context = encode(&maps[0], &a);
    CUdevice dev;
    CUcontext ctx;
    DRV(cuDeviceGet(&dev, 0));
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    DRV(cuCtxSetCurrent(ctx));
    CUdeviceptr weights;
    DRV(cuMemAlloc(&weights, 4096 * 1024 * 2));
    a = operand(weights);
    memset(maps, 0xa5, sizeof maps);
    int ok = encode(&maps[0], &a);
    int again = encode(&maps[1], &a);
    int same = !memcmp(&maps[0], &maps[1], sizeof maps[0]);
    int misaligned_map = encode((CUtensorMap *)((char *)&maps[2] + 32), &a);

    struct args b = a;
    b.rank = 0;
    int rank0 = encode(&maps[2], &b);
    b = a;
    b.rank = 6;
    int rank6 = encode(&maps[2], &b);
    b = a;
    b.address = (char *)a.address + 8;
    int misaligned_address = encode(&maps[2], &b);
    b = a;
    b.strides[0] = 4096 * 2 + 8;
    int stride = encode(&maps[2], &b);
    b = a;
    b.box[1] = 257;
    int box = encode(&maps[2], &b);
    b = a;
    b.element_strides[1] = 9;
    int element_stride = encode(&maps[2], &b);
    b = a;
    b.box[0] = 128; /* 256 bytes: wider than the 128-byte swizzle */
    int swizzle = encode(&maps[2], &b);
    b = a;
    b.dims[1] = 0;
    int dim = encode(&maps[2], &b);
    RESULT("before_init=%d no_context=%d ok=%d again=%d same=%d misaligned_map=%d", before_init, no_context, ok,
           again, same, misaligned_map);
    RESULT("rank0=%d rank6=%d misaligned_address=%d stride=%d box=%d element_stride=%d swizzle=%d dim=%d", rank0,
           rank6, misaligned_address, stride, box, element_stride, swizzle, dim);
    return 0;
}
