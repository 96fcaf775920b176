/* Pinned and managed host memory: the fakes hand out real host memory, so the program writes into
 * it; registration errors are the runtime's codes.
 * RESULT keys: host_alloc_ok host_alloc_mapped_ok register_ok reregister_error unregister_again_error
 *              bad_free_host_error managed_ok copy_ok device_delta_pinned */
#include <stdint.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "sim.h"

int main(void) {
    RT(cudaSetDevice(0));
    size_t f0 = 0, f1 = 0, t = 0;
    RT(cudaMemGetInfo(&f0, &t));

    char *h = NULL, *m = NULL;
    RT(cudaMallocHost((void **)&h, 4 * MIB));
    memset(h, 0x11, 4 * MIB);
    RESULT("host_alloc_ok=%d", h[4 * MIB - 1] == 0x11);
    RT(cudaHostAlloc((void **)&m, 2 * MIB, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(m, 0x22, 2 * MIB);
    RESULT("host_alloc_mapped_ok=%d", m[0] == 0x22);

    size_t reg_size = 3 * MIB;
    char *plain = aligned_alloc(4096, reg_size);
    if (!plain) FAIL("aligned_alloc");
    RT(cudaHostRegister(plain, reg_size, cudaHostRegisterDefault));
    plain[0] = 1;
    RESULT("register_ok=1");
    RESULT("reregister_error=%d", (int)cudaHostRegister(plain, reg_size, cudaHostRegisterDefault));
    RT(cudaMemGetInfo(&f1, &t));
    RESULT("device_delta_pinned=%lld", (long long)f0 - (long long)f1);

    void *d = NULL;
    RT(cudaMalloc(&d, 4 * MIB));
    RT(cudaMemcpy(d, h, 4 * MIB, cudaMemcpyHostToDevice));
    RT(cudaMemcpy(h, d, 4 * MIB, cudaMemcpyDeviceToHost));
    RT(cudaFree(d));

    char *u = NULL;
    RT(cudaMallocManaged((void **)&u, 2 * MIB, cudaMemAttachGlobal));
    memset(u, 0x33, 2 * MIB);
    RT(cudaMemcpy(m, u, 2 * MIB, cudaMemcpyDefault));
    RESULT("managed_ok=%d copy_ok=%d", u[2 * MIB - 1] == 0x33, m[2 * MIB - 1] == 0x33);
    RT(cudaFree(u));

    RT(cudaHostUnregister(plain));
    RESULT("unregister_again_error=%d", (int)cudaHostUnregister(plain));
    free(plain);
    int local = 0;
    RESULT("bad_free_host_error=%d", (int)cudaFreeHost(&local));
    (void)cudaGetLastError();
    RT(cudaFreeHost(m));
    RT(cudaFreeHost(h));
    return 0;
}
