/* Minimal stand-in for CUDA's internal `crt/host_defines.h`, for compiling host-only C/C++ against
 * the runtime API headers with a plain host compiler (gcc/clang, Linux x86-64).
 *
 * The nvidia-cuda-runtime-cu12 wheel that scripts/fetch-cuda-headers.sh unpacks ships
 * cuda_runtime_api.h but not the crt/ directory (that comes with nvcc). The Makefile puts this
 * directory AFTER the official include directory, so a real crt/host_defines.h always wins.
 * Written for culedger: it only gives the execution-space and ABI annotations their host meaning. */
#ifndef CULEDGER_COMPAT_CRT_HOST_DEFINES_H
#define CULEDGER_COMPAT_CRT_HOST_DEFINES_H

/* Execution-space qualifiers mean nothing to a host compiler. */
#define __host__
#define __device__
#define __global__
#define __shared__
#define __constant__
#define __managed__
#define __device_builtin__
#define __device_builtin_texture_type__
#define __device_builtin_surface_type__
#define __cudart_builtin__
#define __launch_bounds__(...)

/* Calling convention: the default one on Linux. */
#define CUDARTAPI
#define CUDARTAPI_CDECL

#define __no_return__ __attribute__((noreturn))
#define __noinline__ __attribute__((noinline))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __thread__ __thread
#define __import__
#define __export__
#define __cdecl
#define __annotate__(a) __attribute__((a))
#define __location__(a) __annotate__(a)
#define __builtin_align__(a) __align__(a)
#define __specialization_static

#endif
