/* CUDA graph capture: stream-ordered alloc/memset/free captured on a stream, instantiated,
 * launched and destroyed; capture of the legacy stream is refused.
 * RESULT keys: legacy_capture_error legacy_handle_capture_error per_thread_capture_error capture_status graph_nonnull instantiate_delta launches
 *              after_destroy_delta exchange_old_mode */
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "sim.h"

static size_t free_bytes(void) {
    size_t f = 0, t = 0;
    RT(cudaMemGetInfo(&f, &t));
    return f;
}

int main(void) {
    RT(cudaSetDevice(0));
    cudaStream_t s;
    RT(cudaStreamCreate(&s));

    RESULT("legacy_capture_error=%d", (int)cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal));
    RESULT("legacy_handle_capture_error=%d",
           (int)cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal));
    (void)cudaGetLastError();

    /* The per-thread default stream can be captured (it reaches the driver's _ptsz entries). */
    void *t = NULL;
    cudaGraph_t pg = NULL;
    RT(cudaMalloc(&t, 2 * MIB));
    RESULT("per_thread_capture_error=%d",
           (int)cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
    RT(cudaMemsetAsync(t, 0, 2 * MIB, cudaStreamPerThread));
    RT(cudaStreamEndCapture(cudaStreamPerThread, &pg));
    RT(cudaGraphDestroy(pg));
    RT(cudaFree(t));

    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    RT(cudaThreadExchangeStreamCaptureMode(&m));
    RESULT("exchange_old_mode=%d", (int)m);
    RT(cudaThreadExchangeStreamCaptureMode(&m)); /* restore */

    size_t f0 = free_bytes();
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    RT(cudaStreamIsCapturing(s, &st));
    RESULT("capture_status=%d", (int)st);
    void *p = NULL;
    RT(cudaMallocAsync(&p, 4 * MIB, s));
    RT(cudaMemsetAsync(p, 0, 4 * MIB, s));
    RT(cudaFreeAsync(p, s));
    cudaGraph_t g = NULL;
    RT(cudaStreamEndCapture(s, &g));
    RESULT("graph_nonnull=%d", g != NULL);

    cudaGraphExec_t exec = NULL;
    RT(cudaGraphInstantiate(&exec, g, 0));
    size_t f1 = free_bytes();
    RESULT("instantiate_delta=%zu", f0 - f1);
    int launches = 0;
    for (int i = 0; i < 3; i++, launches++) RT(cudaGraphLaunch(exec, s));
    RT(cudaStreamSynchronize(s));
    RESULT("launches=%d", launches);

    cudaGraphExec_t exec2 = NULL;
    RT(cudaGraphInstantiateWithFlags(&exec2, g, 0));
    RT(cudaGraphExecDestroy(exec2));
    RT(cudaGraphExecDestroy(exec));
    RT(cudaGraphDestroy(g));
    RT(cudaStreamDestroy(s));
    RESULT("after_destroy_delta=%zu", f0 - free_bytes());
    return 0;
}
