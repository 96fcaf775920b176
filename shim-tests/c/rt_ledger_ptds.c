/* rt_ledger built as nvcc --default-stream per-thread would: the runtime's stream-ordered
 * calls bind to their exported _ptsz/_ptds forms (cudaMallocAsync_ptsz, ...). */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "rt_ledger.c"
