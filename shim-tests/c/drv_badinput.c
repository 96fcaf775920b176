/* Bad input at the resolution paths, for shim-tests/scenarios/tests/badinput.rs: the driver's
 * resolver asked for unknown, empty, versioned, huge or NULL names and absurd versions and
 * flags, and dlsym with NULL, RTLD_DEFAULT, RTLD_NEXT and closed handles. Prints one
 * `RESULT case=... rc=... status=... null=...` line per case (no addresses: they differ between
 * runs), so a run under culedger must print exactly what a plain run prints.
 *
 *   drv_badinput getproc     the cuGetProcAddress cases, then an allocation through an entry
 *                            resolved at a huge version (culedger must count it)
 *   drv_badinput dlsym       the dlsym cases
 *   drv_badinput dlsym_null  dlsym(RTLD_DEFAULT, NULL): glibc itself crashes on it */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "sim.h"

static void getproc_case(const char *name, const char *symbol, int version, cuuint64_t flags, int with_pfn,
                         int with_status) {
    void *pfn = (void *)1;
    CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)77;
    CUresult rc = cuGetProcAddress(symbol, with_pfn ? &pfn : NULL, version, flags, with_status ? &status : NULL);
    printf("RESULT case=%s rc=%d status=%d null=%d\n", name, (int)rc, with_status ? (int)status : -1,
           with_pfn ? pfn == NULL : -1);
}

typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*version_t)(int *);

static int getproc(void) {
    static char huge[1 << 16];
    memset(huge, 'x', sizeof huge - 1);
    huge[0] = 'c', huge[1] = 'u';
    getproc_case("empty", "", 12090, 0, 1, 1);
    getproc_case("unknown", "cuNoSuchFunction", 12090, 0, 1, 1);
    getproc_case("not_cuda", "cudnnCreate", 12090, 0, 1, 1);
    getproc_case("versioned_name", "cuMemAlloc_v2", 12090, 0, 1, 1);
    getproc_case("huge_name", huge, 12090, 0, 1, 1);
    getproc_case("version_max", "cuMemAlloc", INT_MAX, 0, 1, 1);
    getproc_case("version_negative", "cuMemAlloc", -1, 0, 1, 1);
    getproc_case("version_zero", "cuMemAlloc", 0, 0, 1, 1);
    getproc_case("flags_3", "cuMemAlloc", 12090, 3, 1, 1);
    getproc_case("flags_max", "cuMemAlloc", 12090, UINT64_MAX, 1, 1);
    getproc_case("null_symbol", NULL, 12090, 0, 1, 1);
    getproc_case("null_pfn", "cuMemAlloc", 12090, 0, 0, 1);
    getproc_case("null_status", "cuMemAlloc", 12090, 0, 1, 0);
    getproc_case("per_thread_max", "cuMemcpyHtoD", INT_MAX, 2, 1, 1);

    /* An entry resolved at a huge version still works, and under culedger it is accounted. */
    DRV(cuInit(0));
    CUcontext ctx;
    DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
    DRV(cuCtxSetCurrent(ctx));
    void *fn = NULL;
    DRV(cuGetProcAddress("cuMemAlloc", &fn, INT_MAX, 0, NULL));
    CUdeviceptr p = 0;
    DRV(((alloc_t)fn)(&p, 6 * MIB));
    DRV(cuGetProcAddress("cuDriverGetVersion", &fn, INT_MAX, 0, NULL));
    int v = 0;
    DRV(((version_t)fn)(&v));
    printf("RESULT live=%zu driver_version=%d\n", 6 * MIB, v);
    return 0;
}

static void dlsym_case(const char *name, void *handle, const char *symbol) {
    dlerror();
    void *p = dlsym(handle, symbol);
    const char *err = dlerror();
    printf("RESULT case=%s null=%d dlerror=%d\n", name, p == NULL, err != NULL);
    /* The words too: a framework's "driver not found" diagnostic prints them. */
    printf("DLERROR %s: %s\n", name, err ? err : "(none)");
}

static int dlsym_cases(void) {
    dlsym_case("null_handle_hooked", NULL, "cuMemAlloc_v2");
    dlsym_case("null_handle_plain", NULL, "getpid");
    dlsym_case("default_hooked", RTLD_DEFAULT, "cuMemAlloc_v2");
    dlsym_case("default_runtime_absent", RTLD_DEFAULT, "cudaMalloc"); /* no runtime loaded */
    void *self = dlopen(NULL, RTLD_NOW);
    EXPECT(self != NULL);
    dlsym_case("self_runtime_absent", self, "cudaMalloc");
    dlsym_case("default_unknown", RTLD_DEFAULT, "cuNoSuchFunction");
    dlsym_case("next_hooked", RTLD_NEXT, "cuMemAlloc_v2");
    dlsym_case("next_plain", RTLD_NEXT, "getpid");
    dlsym_case("next_unknown", RTLD_NEXT, "culedgerNoSuchSymbol");
    dlsym_case("empty_name", RTLD_DEFAULT, "");
    /* A closed handle whose library stays loaded (the program links libcuda): still valid. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    EXPECT(h != NULL);
    dlclose(h);
    dlsym_case("closed_handle_hooked", h, "cuMemAlloc_v2");
    dlsym_case("closed_handle_plain", h, "cuDriverGetVersion");
    /* A handle of a library that was really unloaded is undefined behaviour in glibc; not
     * tested. A handle on a library without CUDA: */
    void *m = dlopen("libm.so.6", RTLD_NOW);
    EXPECT(m != NULL);
    dlsym_case("libm_hooked_name", m, "cuMemAlloc_v2");
    dlsym_case("libm_plain", m, "cos");
    dlclose(m);
    /* What came back from the driver's handle is callable. */
    h = dlopen("libcuda.so.1", RTLD_NOW);
    version_t ver = (version_t)dlsym(h, "cuDriverGetVersion");
    int v = 0;
    EXPECT(ver != NULL && ver(&v) == CUDA_SUCCESS);
    printf("RESULT driver_version=%d\n", v);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "getproc")) return getproc();
    if (!strcmp(mode, "dlsym")) return dlsym_cases();
    if (!strcmp(mode, "dlsym_null")) {
        fflush(stdout);
        const char *volatile no_name = NULL; /* hidden from the compiler's nonnull check */
        dlsym(RTLD_DEFAULT, no_name);
        printf("RESULT survived=1\n");
        return 0;
    }
    FAIL("unknown mode '%s'", mode);
}
