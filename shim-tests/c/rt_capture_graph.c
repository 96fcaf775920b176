/* Runtime scenario: capture into a graph the program created (cudaStreamBeginCaptureToGraph,
 * CUDA 12.3) and instantiation with a parameter struct (cudaGraphInstantiateWithParams, 12.0).
 * Prints RESULT lines. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "sim.h"

#define MiB (1024ull * 1024ull)

int main(void) {
    RT(cudaSetDevice(0));
    cudaStream_t s;
    RT(cudaStreamCreate(&s));
    cudaGraph_t g, out;
    RT(cudaGraphCreate(&g, 0));
    void *p = NULL, *q = NULL;
    RT(cudaStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, cudaStreamCaptureModeRelaxed));
    RT(cudaMallocAsync(&p, 6 * MiB, s));
    RT(cudaStreamEndCapture(s, &out));
    RT(cudaMalloc(&q, 2 * MiB));
    cudaGraphInstantiateParams params;
    memset(&params, 0, sizeof params);
    cudaGraphExec_t e;
    RT(cudaGraphInstantiateWithParams(&e, g, &params));
    RESULT("same_graph=%d captured=%llu live=%llu result=%d", out == g, 6 * MiB, 8 * MiB, (int)params.result_out);
    return 0;
}
