/* Driver-API scenario compiled against CUDA 13.5's cuda.h (what a C++ engine built with the
 * CUDA 13 toolkit calls: `cuCtxCreate` is `cuCtxCreate_v4`, capture into existing graphs,
 * instantiation with a parameter struct). Run on the fake driver answering as a 13.x driver
 * (FAKECUDA_DRIVER_VERSION=13050). Prints RESULT lines; modes: ctx, graphs, modules. */
#include <cuda.h>
#include <string.h>

#include "sim.h"

#if CUDA_VERSION < 13000
#error "compile against the CUDA 13 headers (target/cuda13/<version>/include)"
#endif

#define MiB (1024ull * 1024ull)

static CUcontext setup(int ordinal) {
    CUdevice dev;
    CUcontext ctx;
    DRV(cuInit(0));
    DRV(cuDeviceGet(&dev, ordinal));
    DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
    DRV(cuCtxSetCurrent(ctx));
    return ctx;
}

typedef CUresult (*ctx_get_device_v13_t)(CUdevice *, CUcontext);

/* Contexts: a second context next to the primary one on device 0 (its cost is measurable),
 * the first one on device 1 (it is not), an allocation on each, and the CUDA 13 ABI of
 * cuCtxGetDevice (2 arguments) resolved by base name at 13000. */
static int ctx(void) {
    CUcontext primary = setup(0);
    int version = 0;
    DRV(cuDriverGetVersion(&version));
    CUcontext second, other;
    DRV(cuCtxCreate(&second, NULL, 0, 0)); /* cuCtxCreate_v4 */
    CUdeviceptr a, b;
    DRV(cuMemAlloc(&a, 4 * MiB));
    DRV(cuCtxCreate(&other, NULL, 0, 1)); /* first context on device 1 */
    DRV(cuMemAlloc(&b, 6 * MiB));
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    DRV(cuGetProcAddress("cuCtxGetDevice", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CUdevice of_primary = -1, current = -1;
    DRV(((ctx_get_device_v13_t)fn)(&of_primary, primary));
    DRV(((ctx_get_device_v13_t)fn)(&current, NULL));
    RESULT("driver=%d dev0_live=%llu dev1_live=%llu of_primary=%d current=%d", version, 4 * MiB, 6 * MiB,
           (int)of_primary, (int)current);
    return 0;
}

typedef CUresult (*instantiate_12_t)(CUgraphExec *, CUgraph, unsigned long long);

/* Capture into a graph the program created, capture again into it (13.3), instantiate with a
 * parameter struct, and `cuGraphInstantiate` resolved at 12000 (the driver hands out
 * cuGraphInstantiateWithFlags, 3 arguments). */
static int graphs(void) {
    setup(0);
    CUstream s;
    DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph g, out;
    DRV(cuGraphCreate(&g, 0));
    CUdeviceptr p1, p2, plain;
    DRV(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    DRV(cuMemAllocAsync(&p1, 6 * MiB, s));
    DRV(cuStreamEndCapture(s, &out));
    DRV(cuMemAlloc(&plain, 2 * MiB)); /* not captured */
    DRV(cuStreamBeginRecaptureToGraph(s, CU_STREAM_CAPTURE_MODE_RELAXED, g, NULL, NULL));
    DRV(cuMemAllocAsync(&p2, 4 * MiB, s));
    DRV(cuStreamEndCapture(s, &out));
    CUDA_GRAPH_INSTANTIATE_PARAMS params;
    memset(&params, 0, sizeof params);
    CUgraphExec e1, e2;
    DRV(cuGraphInstantiateWithParams(&e1, g, &params));
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    DRV(cuGetProcAddress("cuGraphInstantiate", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    DRV(((instantiate_12_t)fn)(&e2, g, 0));
    RESULT("same_graph=%d captured=%llu live=%llu instantiate_result=%d", out == g, 10 * MiB, 12 * MiB,
           (int)params.result_out);
    return 0;
}

/* Module and library loads the 13.x runtime and JITs use: a module costs driver memory when
 * loaded; a library, loaded lazily as a real driver does by default, costs it when a kernel of it
 * is first used in a context (`lazy` is what that first use took, as cuMemGetInfo sees it). */
static int modules(const char *self) {
    setup(0);
    static const char image[] = "a module image";
    CUmodule m1, m2;
    DRV(cuModuleLoadDataEx(&m1, image, 0, NULL, NULL));
    DRV(cuModuleLoadFatBinary(&m2, image));
    CUlibrary lib;
    DRV(cuLibraryLoadFromFile(&lib, self, NULL, NULL, 0, NULL, NULL, 0));
    size_t before, after, total;
    DRV(cuMemGetInfo(&before, &total));
    CUkernel kernel;
    CUfunction fn;
    DRV(cuLibraryGetKernel(&kernel, lib, "main_kernel"));
    DRV(cuKernelGetFunction(&fn, kernel));
    DRV(cuMemGetInfo(&after, &total));
    RESULT("loads=3 lazy=%zu", before - after);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ctx";
    if (!strcmp(mode, "ctx")) return ctx();
    if (!strcmp(mode, "graphs")) return graphs();
    if (!strcmp(mode, "modules")) return modules(argv[0]);
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
