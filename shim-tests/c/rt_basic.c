/* Runtime basics: malloc/free, meminfo accounting, memcpy/memset round trip, strict errors, OOM.
 * Exits 3 (after RESULT init_error=... malloc_error=...) when there is no usable driver.
 * RESULT keys: free0 free1 total alloc_delta copy_ok oom_error oom_last_error last_after_get
 *              bad_free_error zero_size_ptr runtime_version driver_version device_count peer_error
 *              peer_again_error peer_self_error peer_flags_error reset_error after_reset_ok */
#include <stdint.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "sim.h"

int main(void) {
    int n = 0, rtv = 0, drv = 0;
    RT(cudaRuntimeGetVersion(&rtv));
    RT(cudaDriverGetVersion(&drv));
    cudaError_t init = cudaGetDeviceCount(&n);
    RESULT("runtime_version=%d driver_version=%d device_count=%d init_error=%d", rtv, drv, n, (int)init);
    if (init != cudaSuccess) {
        /* No usable driver: every later call reports the same error, and nothing crashed. */
        void *p = NULL;
        RESULT("malloc_error=%d last_error=%d", (int)cudaMalloc(&p, MIB), (int)cudaGetLastError());
        return 3;
    }
    RT(cudaSetDevice(0));

    size_t free0 = 0, free1 = 0, total = 0;
    RT(cudaMemGetInfo(&free0, &total));
    void *a = NULL, *b = NULL;
    RT(cudaMalloc(&a, 64 * MIB));
    RT(cudaMalloc(&b, 3 * MIB)); /* rounded up by the driver */
    RT(cudaMemGetInfo(&free1, &total));
    RESULT("free0=%zu free1=%zu total=%zu alloc_delta=%zu", free0, free1, total, free0 - free1);

    /* Copy through device memory: the fake driver does not keep device bytes, so only the
     * calls' success and host-side round trips are checked. */
    char host[4096], back[4096];
    memset(host, 0x5a, sizeof host);
    RT(cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice));
    RT(cudaMemcpy(b, a, sizeof host, cudaMemcpyDeviceToDevice));
    RT(cudaMemcpy(back, b, sizeof back, cudaMemcpyDeviceToHost));
    RT(cudaMemset(a, 0, 64 * MIB));
    RT(cudaMemcpy(back, host, sizeof host, cudaMemcpyHostToHost));
    RESULT("copy_ok=%d", memcmp(back, host, sizeof host) == 0);
    EXPECT(cudaMemcpy(back, a, 16, (enum cudaMemcpyKind)7) == cudaErrorInvalidMemcpyDirection);
    (void)cudaGetLastError();

    /* A request larger than the card must fail cleanly and be the sticky-until-read last error. */
    void *huge = (void *)0x1;
    cudaError_t oom = cudaMalloc(&huge, total + 2 * MIB);
    RESULT("oom_error=%d oom_ptr_unchanged=%d", (int)oom, huge == (void *)0x1);
    RESULT("oom_peek=%d", (int)cudaPeekAtLastError());
    RESULT("oom_last_error=%d", (int)cudaGetLastError());
    RESULT("last_after_get=%d", (int)cudaGetLastError());

    /* Strict validation. */
    int local = 0;
    RESULT("bad_free_error=%d", (int)cudaFree(&local));
    RESULT("double_free_error=%d", (cudaFree(b), (int)cudaFree(b)));
    RESULT("null_out_error=%d", (int)cudaMalloc(NULL, MIB));
    RESULT("bad_device_error=%d", (int)cudaSetDevice(n));
    void *z = (void *)0x1;
    RT(cudaMalloc(&z, 0));
    RESULT("zero_size_ptr=%lu", (unsigned long)(uintptr_t)z);
    RESULT("oom_name=%s", cudaGetErrorName(cudaErrorMemoryAllocation));
    (void)cudaGetLastError();

    RT(cudaFree(a));
    RT(cudaDeviceSynchronize());
    size_t free2 = 0;
    RT(cudaMemGetInfo(&free2, &total));
    RESULT("free_end=%zu", free2);

    /* Peer access from device 0 to device 1 (hidden cost charged by the driver). */
    if (n > 1) {
        RESULT("peer_error=%d", (int)cudaDeviceEnablePeerAccess(1, 0));
        RESULT("peer_again_error=%d", (int)cudaDeviceEnablePeerAccess(1, 0));
        RESULT("peer_self_error=%d", (int)cudaDeviceEnablePeerAccess(0, 0));
        RESULT("peer_flags_error=%d", (int)cudaDeviceEnablePeerAccess(1, 1));
        (void)cudaGetLastError();
    }

    /* cudaDeviceReset drops the primary context; the next call builds a new one. */
    RESULT("reset_error=%d", (int)cudaDeviceReset());
    void *c = NULL;
    RT(cudaMalloc(&c, 2 * MIB));
    RT(cudaFree(c));
    RESULT("after_reset_ok=1");
    return 0;
}
