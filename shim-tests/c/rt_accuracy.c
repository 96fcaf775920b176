/* Ledger accuracy on the runtime API (issue [11], items 7 and 8): failed frees leave their
 * allocation as it was, and stream-ordered allocations land on the stream's device.
 * Linked against the runtime (libcudart.so.12). Prints `RESULT key=value` lines. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "sim.h"

/* cudaFree / cudaFreeHost during a global-mode capture fail with 900
 * (cudaErrorStreamCaptureUnsupported) and invalidate the capture; nothing is freed. */
static int free_in_capture(void) {
    RT(cudaSetDevice(0));
    void *exported = NULL, *managed = NULL, *plain = NULL, *pinned = NULL;
    RT(cudaMalloc(&exported, 64 * MIB));
    cudaIpcMemHandle_t h;
    RT(cudaIpcGetMemHandle(&h, exported));
    RT(cudaMallocManaged(&managed, 32 * MIB, cudaMemAttachGlobal));
    RT(cudaMalloc(&plain, 16 * MIB));
    RT(cudaMallocHost(&pinned, 4 * MIB));
    cudaStream_t s;
    RT(cudaStreamCreate(&s));
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t e1 = cudaFree(exported);
    cudaError_t e2 = cudaFree(managed);
    cudaError_t e3 = cudaFreeHost(pinned);
    cudaGraph_t g = NULL;
    cudaError_t end = cudaStreamEndCapture(s, &g);
    cudaGetLastError();
    RT(cudaIpcGetMemHandle(&h, exported)); /* exported again: still one exported buffer */
    RT(cudaFree(plain));
    RESULT("free_rc=%d managed_rc=%d host_rc=%d end_rc=%d", (int)e1, (int)e2, (int)e3, (int)end);
    RESULT("live=%zu ipc=%zu other=%zu pinned=%zu allocs=3 frees=1", 96 * MIB, 64 * MIB, 32 * MIB, 4 * MIB);
    return 0;
}

/* cudaMallocAsync on device 1's stream while device 0 is current. */
static int async_devices(void) {
    RT(cudaSetDevice(1));
    cudaStream_t s1;
    RT(cudaStreamCreate(&s1));
    RT(cudaSetDevice(0));
    void *a = NULL, *b = NULL;
    RT(cudaMallocAsync(&a, 256 * MIB, s1));
    RT(cudaMallocAsync(&b, 32 * MIB, cudaStreamPerThread));
    RESULT("dev0=%zu dev1=%zu", 32 * MIB, 256 * MIB);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "free_in_capture")) return free_in_capture();
    if (!strcmp(mode, "async_devices")) return async_devices();
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
