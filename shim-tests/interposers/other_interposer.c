/* Another LD_PRELOAD interposer, written the usual way: it defines cudaMalloc and
 * cuMemAlloc_v2 and forwards with dlsym(RTLD_NEXT, ...). Placed after (or before)
 * libculedger.so in LD_PRELOAD, its RTLD_NEXT lookups must still find the definition
 * after IT, not after libculedger; a dlsym hook that forwards RTLD_NEXT with an ordinary
 * call would hand it its own function back and it would recurse forever.
 * It also checks that RTLD_NEXT for a name nobody hooks (malloc) still works. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

static int malloc_calls, cu_calls, depth;

cudaError_t cudaMalloc(void **p, size_t n) {
    static cudaError_t (*next)(void **, size_t);
    if (!next) next = (cudaError_t (*)(void **, size_t))dlsym(RTLD_NEXT, "cudaMalloc");
    if (!next || next == cudaMalloc) {
        fprintf(stderr, "OTHER_INTERPOSER broken: RTLD_NEXT gave %s\n", next ? "itself" : "NULL");
        abort();
    }
    if (++depth > 1) {
        fprintf(stderr, "OTHER_INTERPOSER recursion\n");
        abort();
    }
    malloc_calls++;
    cudaError_t rc = next(p, n);
    depth--;
    return rc;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    static CUresult (*next)(CUdeviceptr *, size_t);
    if (!next) next = (CUresult (*)(CUdeviceptr *, size_t))dlsym(RTLD_NEXT, "cuMemAlloc_v2");
    if (!next || next == cuMemAlloc_v2) {
        fprintf(stderr, "OTHER_INTERPOSER broken: RTLD_NEXT gave %s for cuMemAlloc_v2\n", next ? "itself" : "NULL");
        abort();
    }
    cu_calls++;
    return next(p, n);
}

__attribute__((destructor)) static void other_interposer_report(void) {
    void *(*m)(size_t) = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    fprintf(stderr, "OTHER_INTERPOSER cudaMalloc=%d cuMemAlloc_v2=%d malloc_next=%s\n", malloc_calls, cu_calls,
            m ? "ok" : "missing");
}
