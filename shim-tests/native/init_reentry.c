/* A runtime that calls the driver from inside its own initialisation, as NVIDIA's libcudart
 * 12.x/13.x does: it dlopens libcuda.so.1, resolves its entry points with cuGetProcAddress_v2,
 * and loads its modules with cuLibraryLoadData before any context is current. Its exported
 * runtime entry points (here cudaGetDevice, found in the global scope: the program is linked
 * with -rdynamic) wait for that initialisation to finish, as cudart's do.
 *
 * A hook that answers a driver call made during the initialisation by calling back into the
 * runtime waits for the initialisation it is part of: for ever in cudart (a sched_yield loop).
 * Here the wait is bounded: after 3 s cudaGetDevice says so on stderr and the program exits
 * with status 3, so a test sees the hang instead of hanging.
 *
 *   init_reentry [loads]   (default 4 loads)
 * RESULT lines: the driver's answers with no context current, then with the primary context.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../c/sim.h"

/* 0: not started, 1: in progress, 2: done. */
static atomic_int init_state;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The runtime's entry point: waits for the initialisation like every cudart entry point. */
__attribute__((visibility("default"))) int cudaGetDevice(int *device) {
    double start = now_s();
    while (atomic_load(&init_state) == 1) {
        if (now_s() - start > 3.0) {
            fprintf(stderr, "init_reentry: cudaGetDevice entered during the runtime's own initialisation: "
                            "it waits for itself (a real runtime never returns)\n");
            _exit(3);
        }
        sched_yield();
    }
    if (device) *device = 0;
    return 0;
}

typedef CUresult (*GetProc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static GetProc get_proc;

/* A driver call that must succeed (sim.h's DRV names the error through the linked driver;
 * this program links none). */
#define CHECK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) FAIL("%s -> %d", #call, (int)r_); } while (0)

static void *entry(const char *name, int version) {
    void *p = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult rc = get_proc(name, &p, version, 0, &status);
    if (rc != CUDA_SUCCESS || !p) FAIL("cuGetProcAddress_v2(%s, %d) -> %d", name, version, (int)rc);
    return p;
}

int main(int argc, char **argv) {
    int loads = argc > 1 ? atoi(argv[1]) : 4;
    atomic_store(&init_state, 1);

    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) FAIL("dlopen(libcuda.so.1): %s", dlerror());
    get_proc = (GetProc)dlsym(h, "cuGetProcAddress_v2");
    if (!get_proc) FAIL("no cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = entry("cuInit", 2000);
    CUresult (*library_load)(CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *,
                             void **, unsigned) = entry("cuLibraryLoadData", 12000);
    CUresult (*library_unload)(CUlibrary) = entry("cuLibraryUnload", 12000);
    CUresult (*mem_get_info)(size_t *, size_t *) = entry("cuMemGetInfo", 3020);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = entry("cuMemAlloc", 3020);
    CUresult (*mem_free)(CUdeviceptr) = entry("cuMemFree", 3020);
    CUresult (*ctx_get_device)(CUdevice *) = entry("cuCtxGetDevice", 2000);
    CUresult (*retain)(CUcontext *, CUdevice) = entry("cuDevicePrimaryCtxRetain", 7000);
    CUresult (*set_current)(CUcontext) = entry("cuCtxSetCurrent", 4000);
    CHECK(init(0));

    /* The initialisation's module loads: no context is current on this thread. */
    static const unsigned char image[64] = {0x7f, 'E', 'L', 'F'};
    CUlibrary libs[64];
    if (loads > 64) loads = 64;
    int loaded = 0;
    for (int i = 0; i < loads; i++) loaded += library_load(&libs[i], image, NULL, NULL, 0, NULL, NULL, 0) == CUDA_SUCCESS;
    CUdevice dev = -1;
    size_t free_b = 0, total_b = 0;
    CUdeviceptr early = 0;
    RESULT("no_ctx_loaded=%d no_ctx_get_device_rc=%d no_ctx_mem_get_info_rc=%d no_ctx_alloc_rc=%d", loaded,
           (int)ctx_get_device(&dev), (int)mem_get_info(&free_b, &total_b), (int)mem_alloc(&early, 1 << 20));
    atomic_store(&init_state, 2);

    /* After the initialisation: the primary context current, an allocation, one more load. */
    CUcontext ctx;
    CHECK(retain(&ctx, 0));
    CHECK(set_current(ctx));
    CUdeviceptr p = 0;
    CHECK(mem_alloc(&p, 4 * MIB));
    CUlibrary late;
    CHECK(library_load(&late, image, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(mem_get_info(&free_b, &total_b));
    RESULT("live_mib=4 free=%zu total=%zu", free_b, total_b);
    CHECK(library_unload(late));
    for (int i = 0; i < loaded; i++) CHECK(library_unload(libs[i]));
    CHECK(mem_free(p));
    CHECK(mem_alloc(&p, 2 * MIB));
    RESULT("ok=1");
    return 0;
}
