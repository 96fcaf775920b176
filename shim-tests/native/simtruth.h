/* Ground-truth events of the simulated native libraries (libc10_cuda.so, libnccl.so.2).
 *
 * Each library logs every device memory range it takes from or gives back to CUDA; the
 * Python side of the simulated engines drains the log after each call (in one thread, so the
 * order of events is exact) and keeps the truth per category. Not part of what culedger
 * sees: culedger only sees the CUDA calls. */
#ifndef SIMTRUTH_H
#define SIMTRUTH_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIMTRUTH_ALLOC 1
#define SIMTRUTH_FREE 2

typedef struct {
    int32_t kind;   /* SIMTRUTH_ALLOC or SIMTRUTH_FREE */
    int32_t dev;
    int32_t tag;    /* the truth category index the caller gave (allocations) */
    int32_t api;    /* 0 cudaMalloc, 1 cuMemCreate (VMM), 2 cuMemAlloc_v2 */
    uint64_t base;  /* address (for VMM: the mapped address) */
    uint64_t size;
} simtruth_event;

#define SIMTRUTH_API_CUDA_MALLOC 0
#define SIMTRUTH_API_CU_MEM_CREATE 1
#define SIMTRUTH_API_CU_MEM_ALLOC 2

/* A growable log; the library holds its own lock around these. */
typedef struct {
    simtruth_event *ev;
    int len, cap;
} simtruth_log;

static inline void simtruth_push(simtruth_log *log, simtruth_event e) {
    if (log->len == log->cap) {
        int cap = log->cap ? log->cap * 2 : 256;
        simtruth_event *n = (simtruth_event *)realloc(log->ev, (size_t)cap * sizeof *n);
        if (!n) return; /* the Python side notices missing events as a mismatch */
        log->ev = n;
        log->cap = cap;
    }
    log->ev[log->len++] = e;
}

/* Copy up to max events out, oldest first; returns how many. */
static inline int simtruth_drain(simtruth_log *log, simtruth_event *out, int max) {
    int n = log->len < max ? log->len : max;
    memcpy(out, log->ev, (size_t)n * sizeof *out);
    memmove(log->ev, log->ev + n, (size_t)(log->len - n) * sizeof *out);
    log->len -= n;
    return n;
}

#endif
