/* Holds device memory for a cross-process test: allocates HOLD MiB on device 0, optionally tries
 * to allocate TRY MiB more, reports, then keeps everything until stdin closes.
 * Usage: rt_hold HOLD_MIB [TRY_MIB]. RESULT keys: free total held try_error ready */
#include <stdio.h>
#include <cuda_runtime_api.h>
#include "sim.h"

int main(int argc, char **argv) {
    if (argc < 2) FAIL("usage: rt_hold HOLD_MIB [TRY_MIB]");
    size_t hold = (size_t)strtoull(argv[1], NULL, 10) * MIB;
    RT(cudaSetDevice(0));
    void *p = NULL, *q = NULL;
    RT(cudaMalloc(&p, hold));
    size_t f = 0, t = 0;
    RT(cudaMemGetInfo(&f, &t));
    RESULT("free=%zu total=%zu held=%zu", f, t, hold);
    if (argc > 2) {
        cudaError_t e = cudaMalloc(&q, (size_t)strtoull(argv[2], NULL, 10) * MIB);
        RESULT("try_error=%d", (int)e);
        if (e == cudaSuccess) RT(cudaFree(q));
    }
    RESULT("ready=1");
    while (getchar() != EOF) {}
    RT(cudaFree(p));
    return 0;
}
