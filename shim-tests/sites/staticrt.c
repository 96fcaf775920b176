/* A native library that reaches the driver the way statically linked runtimes do (NCCL,
 * nvcc-built extensions): dlopen("libcuda.so.1"), one dlsym of cuGetProcAddress_v2, then every
 * entry by base name. tests/call_sites.rs checks that its exported function is named as the
 * caller of the allocation. */
#include <dlfcn.h>
#include <stddef.h>

typedef int (*getproc_t)(const char *, void **, int, unsigned long long, int *);
typedef int (*init_t)(unsigned);
typedef int (*retain_t)(void **, int);
typedef int (*setcur_t)(void *);
typedef int (*alloc_t)(unsigned long long *, size_t);

static void *entry(getproc_t gp, const char *name) {
    void *p = NULL;
    int status = 0;
    return gp(name, &p, 12000, 0, &status) == 0 ? p : NULL;
}

/* Allocates `bytes` on device 0; returns the CUresult (or -1 when the driver is missing). */
int staticrt_alloc(size_t bytes, unsigned long long *out) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) return -1;
    getproc_t gp = (getproc_t)dlsym(h, "cuGetProcAddress_v2");
    if (!gp) return -1;
    init_t init = (init_t)entry(gp, "cuInit");
    retain_t retain = (retain_t)entry(gp, "cuDevicePrimaryCtxRetain");
    setcur_t setcur = (setcur_t)entry(gp, "cuCtxSetCurrent");
    alloc_t alloc = (alloc_t)entry(gp, "cuMemAlloc");
    if (!init || !retain || !setcur || !alloc) return -1;
    void *ctx = NULL;
    int rc = init(0);
    if (rc == 0) rc = retain(&ctx, 0);
    if (rc == 0) rc = setcur(ctx);
    if (rc == 0) rc = alloc(out, bytes);
    return rc;
}
