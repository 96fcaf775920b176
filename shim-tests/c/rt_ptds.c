/* Compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM: the header maps the stream-ordered calls to
 * their exported _ptsz/_ptds names, and the NULL stream means the per-thread default stream.
 * RESULT keys: async_ok memcpy_ok entry_point_ok graph_launches null_capture_error legacy_capture_error */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <string.h>
#include <cuda_runtime_api.h>
#include "sim.h"

int main(void) {
    RT(cudaSetDevice(0));
    void *p = NULL;
    RT(cudaMallocAsync(&p, 6 * MIB, 0));            /* cudaMallocAsync_ptsz */
    RT(cudaMemsetAsync(p, 1, MIB, 0));              /* cudaMemsetAsync_ptsz */
    RT(cudaStreamSynchronize(0));                   /* cudaStreamSynchronize_ptsz */
    RT(cudaFreeAsync(p, cudaStreamPerThread));      /* cudaFreeAsync_ptsz */
    RESULT("async_ok=1");

    char h[64] = {0};
    void *d = NULL;
    RT(cudaMalloc(&d, MIB));
    RT(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice)); /* cudaMemcpy_ptds */
    RT(cudaMemset(d, 0, MIB));                               /* cudaMemset_ptds */
    RT(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, 0)); /* cudaMemcpyAsync_ptsz */
    RT(cudaFree(d));
    RESULT("memcpy_ok=1");

    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    RT(cudaGetDriverEntryPoint("cuMemAllocAsync", &fn, cudaEnableDefault, &q)); /* _ptsz */
    RESULT("entry_point_ok=%d", fn != NULL && q == cudaDriverEntryPointSuccess);

    /* Here the NULL stream is the per-thread one, which can be captured; cudaStreamLegacy cannot. */
    cudaGraph_t pg = NULL;
    RESULT("null_capture_error=%d", (int)cudaStreamBeginCapture(0, cudaStreamCaptureModeThreadLocal));
    RT(cudaStreamEndCapture(0, &pg));
    RT(cudaGraphDestroy(pg));
    RESULT("legacy_capture_error=%d", (int)cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal));
    (void)cudaGetLastError();

    cudaStream_t s;
    void *target = NULL;
    RT(cudaMalloc(&target, 2 * MIB));
    RT(cudaStreamCreate(&s));
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)); /* _ptsz */
    RT(cudaMemsetAsync(target, 0, 2 * MIB, s));
    cudaGraph_t g = NULL;
    RT(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e = NULL;
    RT(cudaGraphInstantiate(&e, g, 0));
    RT(cudaGraphLaunch(e, 0)); /* cudaGraphLaunch_ptsz on the per-thread stream */
    RT(cudaGraphExecDestroy(e));
    RT(cudaGraphDestroy(g));
    RT(cudaStreamDestroy(s));
    RT(cudaFree(target));
    RESULT("graph_launches=1");
    return 0;
}
