/* Shared helpers of the C scenarios: machine-checkable output and fail-fast checks.
 * Include after <cuda_runtime_api.h> and/or <cuda.h>. Every scenario prints `RESULT key=value`
 * lines on stdout and exits 0 on success, 1 with a one-line diagnostic on stderr otherwise. */
#ifndef CULEDGER_SIM_H
#define CULEDGER_SIM_H

#include <stdio.h>
#include <stdlib.h>

#define MIB ((size_t)1 << 20)

/* RESULT("key=%d", v) prints "RESULT key=v". */
#define RESULT(...) do { printf("RESULT " __VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

#define FAIL(...) do { fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); \
                       fprintf(stderr, "\n"); exit(1); } while (0)

#define EXPECT(cond) do { if (!(cond)) FAIL("expectation failed: %s", #cond); } while (0)

#ifdef __CUDA_RUNTIME_API_H__
/* Runtime call that must succeed. */
#define RT(call) do { cudaError_t e_ = (call); \
        if (e_ != cudaSuccess) FAIL("%s -> %s (%d): %s", #call, cudaGetErrorName(e_), (int)e_, cudaGetErrorString(e_)); \
    } while (0)
#endif

#ifdef __cuda_cuda_h__
/* Driver call that must succeed. */
#define DRV(call) do { CUresult r_ = (call); \
        if (r_ != CUDA_SUCCESS) { const char *n_ = NULL; cuGetErrorName(r_, &n_); \
            FAIL("%s -> %s (%d)", #call, n_ ? n_ : "?", (int)r_); } \
    } while (0)
#endif

#endif
