/* Driver-API scenario compiled against CUDA 13.5's cuda.h (what a C++ engine built with the
 * CUDA 13 toolkit calls: `cuCtxCreate` is `cuCtxCreate_v4`, capture into existing graphs,
 * instantiation with a parameter struct). Run on the fake driver answering as a 13.x driver
 * (FAKECUDA_DRIVER_VERSION=13050). Prints RESULT lines; modes: ctx, graphs, modules. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CUDA_VERSION < 13000
#error "compile against the CUDA 13 headers (target/cuda13/<version>/include)"
#endif

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

typedef CUresult (*ctx_get_device_v13_t)(CUdevice *, CUcontext);

/* Contexts: a second context next to the primary one on device 0 (its cost is measurable),
 * the first one on device 1 (it is not), an allocation on each, and the CUDA 13 ABI of
 * cuCtxGetDevice (2 arguments) resolved by base name at 13000. */
static int ctx(void) {
    CUcontext primary = setup(0);
    int version = 0;
    CHECK(cuDriverGetVersion(&version));
    CUcontext second, other;
    CHECK(cuCtxCreate(&second, NULL, 0, 0)); /* cuCtxCreate_v4 */
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, 4 * MiB));
    CHECK(cuCtxCreate(&other, NULL, 0, 1)); /* first context on device 1 */
    CHECK(cuMemAlloc(&b, 6 * MiB));
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(cuGetProcAddress("cuCtxGetDevice", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CUdevice of_primary = -1, current = -1;
    CHECK(((ctx_get_device_v13_t)fn)(&of_primary, primary));
    CHECK(((ctx_get_device_v13_t)fn)(&current, NULL));
    printf("RESULT driver=%d dev0_live=%llu dev1_live=%llu of_primary=%d current=%d\n", version, 4 * MiB, 6 * MiB,
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
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph g, out;
    CHECK(cuGraphCreate(&g, 0));
    CUdeviceptr p1, p2, plain;
    CHECK(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemAllocAsync(&p1, 6 * MiB, s));
    CHECK(cuStreamEndCapture(s, &out));
    CHECK(cuMemAlloc(&plain, 2 * MiB)); /* not captured */
    CHECK(cuStreamBeginRecaptureToGraph(s, CU_STREAM_CAPTURE_MODE_RELAXED, g, NULL, NULL));
    CHECK(cuMemAllocAsync(&p2, 4 * MiB, s));
    CHECK(cuStreamEndCapture(s, &out));
    CUDA_GRAPH_INSTANTIATE_PARAMS params;
    memset(&params, 0, sizeof params);
    CUgraphExec e1, e2;
    CHECK(cuGraphInstantiateWithParams(&e1, g, &params));
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CHECK(cuGetProcAddress("cuGraphInstantiate", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CHECK(((instantiate_12_t)fn)(&e2, g, 0));
    printf("RESULT same_graph=%d captured=%llu live=%llu instantiate_result=%d\n", out == g, 10 * MiB, 12 * MiB,
           (int)params.result_out);
    return 0;
}

/* Module and library loads the 13.x runtime and JITs use: each costs driver memory. */
static int modules(const char *self) {
    setup(0);
    static const char image[] = "a module image";
    CUmodule m1, m2;
    CHECK(cuModuleLoadDataEx(&m1, image, 0, NULL, NULL));
    CHECK(cuModuleLoadFatBinary(&m2, image));
    CUlibrary lib;
    CHECK(cuLibraryLoadFromFile(&lib, self, NULL, NULL, 0, NULL, NULL, 0));
    printf("RESULT loads=3\n");
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
