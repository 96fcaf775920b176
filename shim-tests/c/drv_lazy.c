/* Lazy module loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) through the
 * driver API: two context-independent libraries, one loaded from an image inside this program
 * (cuLibraryLoadData), one from a file (cuLibraryLoadFromFile, argv[1]). Loading takes no
 * device memory; each library's memory is taken in a context where it is first used. Each use
 * is bracketed here by the driver's own free-memory figure, printed as what the driver took:
 *   device 0: a kernel of A launched (cuLaunchKernel), then again; a kernel of B launched
 *             with cuLaunchKernelEx, then with cuLaunchKernel_ptsz;
 *   device 1: A's kernel as a function of that context (cuKernelGetFunction), the function
 *             launched; B's module there (cuLibraryGetModule), then a global of B
 *             (cuLibraryGetGlobal);
 *   device 2: A's kernel asked for an attribute (cuFuncGetAttribute), then set one
 *             (cuFuncSetAttribute); B's kernel asked for its occupancy
 *             (cuOccupancyMaxActiveBlocksPerMultiprocessor), then again with flags;
 *   device 3: B's kernel set an attribute first (cuFuncSetAttribute), A's asked for the
 *             dynamic shared memory it can have (cuOccupancyAvailableDynamicSMemPerBlock).
 * Answering about a kernel loads its library as a launch does (the runtime's
 * cudaFuncGetAttributes, cudaFuncSetAttribute and occupancy calls reach these).
 * Usage: drv_lazy FILE_OF_B */
#include <cuda.h>
#include <string.h>

#include "sim.h"

/* The per-thread-stream launch, as cuda.h declares it under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                     unsigned int by, unsigned int bz, unsigned int smem, CUstream stream,
                                     void **params, void **extra);

/* A's image: any bytes do for the simulated driver; it lies in this program's data. */
static const unsigned char image_a[256] = {0x50, 0xed, 0x55, 0xba, 1, 0, 0x10, 0};

static size_t free_now(void) {
    size_t f = 0, t = 0;
    DRV(cuMemGetInfo(&f, &t));
    return f;
}

static CUcontext on(int ordinal) {
    CUdevice dev;
    CUcontext ctx;
    DRV(cuDeviceGet(&dev, ordinal));
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    DRV(cuCtxSetCurrent(ctx));
    return ctx;
}

static void launch(CUfunction f) {
    DRV(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

int main(int argc, char **argv) {
    if (argc < 2) FAIL("usage: drv_lazy FILE_OF_B");
    DRV(cuInit(0));
    CUlibrary a, b;
    size_t before = 0;
    on(0);
    before = free_now();
    DRV(cuLibraryLoadData(&a, image_a, NULL, NULL, 0, NULL, NULL, 0));
    DRV(cuLibraryLoadFromFile(&b, argv[1], NULL, NULL, 0, NULL, NULL, 0));
    RESULT("load_bytes=%zu", before - free_now());
    CUkernel ka, kb;
    DRV(cuLibraryGetKernel(&ka, a, "scale"));
    DRV(cuLibraryGetKernel(&kb, b, "reduce"));

    /* Device 0. */
    before = free_now();
    launch((CUfunction)ka);
    RESULT("dev0_a_launch=%zu", before - free_now());
    before = free_now();
    launch((CUfunction)ka);
    RESULT("dev0_a_again=%zu", before - free_now());
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 32;
    cfg.blockDimY = cfg.blockDimZ = 1;
    before = free_now();
    DRV(cuLaunchKernelEx(&cfg, (CUfunction)kb, NULL, NULL));
    RESULT("dev0_b_launch_ex=%zu", before - free_now());
    before = free_now();
    DRV(cuLaunchKernel_ptsz((CUfunction)kb, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    RESULT("dev0_b_again=%zu", before - free_now());

    /* Device 1. */
    on(1);
    CUfunction fa;
    before = free_now();
    DRV(cuKernelGetFunction(&fa, ka));
    RESULT("dev1_a_get_function=%zu", before - free_now());
    before = free_now();
    launch(fa);
    RESULT("dev1_a_launch=%zu", before - free_now());
    CUmodule mb;
    before = free_now();
    DRV(cuLibraryGetModule(&mb, b));
    RESULT("dev1_b_get_module=%zu", before - free_now());
    CUdeviceptr g;
    size_t gbytes = 0;
    before = free_now();
    DRV(cuLibraryGetGlobal(&g, &gbytes, b, "table"));
    RESULT("dev1_b_global=%zu", before - free_now());

    /* Device 2. */
    on(2);
    int v = 0;
    before = free_now();
    DRV(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, (CUfunction)ka));
    RESULT("dev2_a_get_attribute=%zu", before - free_now());
    before = free_now();
    DRV(cuFuncSetAttribute((CUfunction)ka, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
    RESULT("dev2_a_set_attribute=%zu", before - free_now());
    before = free_now();
    DRV(cuOccupancyMaxActiveBlocksPerMultiprocessor(&v, (CUfunction)kb, 128, 0));
    RESULT("dev2_b_occupancy=%zu", before - free_now());
    before = free_now();
    DRV(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, (CUfunction)kb, 128, 0, 0));
    RESULT("dev2_b_occupancy_flags=%zu", before - free_now());

    /* Device 3. */
    on(3);
    before = free_now();
    DRV(cuFuncSetAttribute((CUfunction)kb, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
    RESULT("dev3_b_set_attribute=%zu", before - free_now());
    size_t smem = 0;
    before = free_now();
    DRV(cuOccupancyAvailableDynamicSMemPerBlock(&smem, (CUfunction)ka, 1, 128));
    RESULT("dev3_a_dynamic_smem=%zu", before - free_now());

    DRV(cuLibraryUnload(a));
    DRV(cuLibraryUnload(b));
    return 0;
}
