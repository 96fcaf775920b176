/* Runtime scenario: capture into a graph the program created (cudaStreamBeginCaptureToGraph,
 * CUDA 12.3) and instantiation with a parameter struct (cudaGraphInstantiateWithParams, 12.0).
 * Prints RESULT lines. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024ull * 1024ull)
#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t r_ = (call);                                                      \
        if (r_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #call, (int)r_);  \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

int main(void) {
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaGraph_t g, out;
    CHECK(cudaGraphCreate(&g, 0));
    void *p = NULL, *q = NULL;
    CHECK(cudaStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, cudaStreamCaptureModeRelaxed));
    CHECK(cudaMallocAsync(&p, 6 * MiB, s));
    CHECK(cudaStreamEndCapture(s, &out));
    CHECK(cudaMalloc(&q, 2 * MiB));
    cudaGraphInstantiateParams params;
    memset(&params, 0, sizeof params);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiateWithParams(&e, g, &params));
    printf("RESULT same_graph=%d captured=%llu live=%llu result=%d\n", out == g, 6 * MiB, 8 * MiB,
           (int)params.result_out);
    return 0;
}
