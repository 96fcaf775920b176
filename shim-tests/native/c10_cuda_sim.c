/* libc10_cuda.so for the simulated engines: a caching allocator in front of the CUDA runtime,
 * following the rules of PyTorch's c10/cuda/CUDACachingAllocator.cpp (read at pytorch/pytorch
 * 001074d2; the size rules are the same in c10/core/CachingDeviceAllocator.h of later versions):
 *
 *   - every request is rounded up to a multiple of kMinBlockSize = 512 bytes (round_size);
 *   - requests of at most kSmallSize = 1 MiB use the small pool, larger ones the large pool
 *     (get_pool);
 *   - a new segment is cudaMalloc'd when no cached free block of the pool fits: kSmallBuffer =
 *     2 MiB for small requests, kLargeBuffer = 20 MiB for requests under kMinLargeAlloc =
 *     10 MiB, else the request rounded up to kRoundLarge = 2 MiB (get_allocation_size);
 *   - the cached block chosen is the smallest free one that fits (best fit, lowest address on
 *     ties; get_free_block);
 *   - a block is split when the remainder is at least 512 bytes (small pool) or more than
 *     1 MiB (large pool) (should_split; max_split_size is unlimited by default);
 *   - freed blocks merge with free neighbours of the same segment and stay cached: segments
 *     go back to CUDA only in emptyCache (fully free segments), or when cudaMalloc fails
 *     (release the cached segments, retry once);
 *   - during graph capture, allocations come from a graph-private pool
 *     (beginAllocateToPool), whose segments are cudaMalloc'd in relaxed capture mode
 *     (cudaMallocMaybeCapturing) and kept until the pool is released;
 *   - a MemPool can have a pluggable allocator (CUDAPluggableAllocator: vLLM's sleep mode uses
 *     cumem_allocator's my_malloc/my_free, which map cuMemCreate'd memory).
 *
 * Not modelled: streams other than for capture detection (no per-stream block reuse rules),
 * expandable segments, garbage collection thresholds, IPC of allocator blocks.
 *
 * Ground truth: every segment taken from or given back to CUDA is logged (simtruth.h) with the
 * truth category the caller passed for the request that created it. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "simtruth.h"

#define kMinBlockSize 512ULL
#define kSmallSize (1ULL << 20)
#define kSmallBuffer (2ULL << 20)
#define kLargeBuffer (20ULL << 20)
#define kMinLargeAlloc (10ULL << 20)
#define kRoundLarge (2ULL << 20)

#define MAX_DEV 16
#define MAX_POOLS 64

typedef void *(*plug_malloc_fn)(ssize_t size, int device, cudaStream_t stream);
typedef void (*plug_free_fn)(void *ptr, ssize_t size, int device, cudaStream_t stream);

struct Segment;
typedef struct Block {
    uint64_t ptr, size;
    int allocated;
    struct Block *prev, *next; /* neighbours within the segment, in address order */
    struct Segment *seg;
} Block;

typedef struct Segment {
    uint64_t base, size;
    int dev, pool, small, tag, api;
    Block *first;
    struct Segment *next;
} Segment;

typedef struct {
    int used;
    plug_malloc_fn m;
    plug_free_fn f;
} PoolInfo;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static Segment *segments;
static PoolInfo pools[MAX_POOLS] = {{1, NULL, NULL}};
static int npools = 1;
static int active_pool[MAX_DEV];
static uint64_t allocated[MAX_DEV], allocated_peak[MAX_DEV], reserved[MAX_DEV], reserved_peak[MAX_DEV];
static simtruth_log truth;

static uint64_t round_size(uint64_t s) {
    return s < kMinBlockSize ? kMinBlockSize : (s + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

static uint64_t allocation_size(uint64_t s) {
    if (s <= kSmallSize) return kSmallBuffer;
    if (s < kMinLargeAlloc) return kLargeBuffer;
    return (s + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

static int should_split(const Block *b, uint64_t size) {
    uint64_t remaining = b->size - size;
    return b->seg->small ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

static int current_device(void) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEV) dev = 0;
    return dev;
}

static Block *best_fit(int dev, int pool, int small, uint64_t size) {
    Block *best = NULL;
    for (Segment *s = segments; s; s = s->next) {
        if (s->dev != dev || s->pool != pool || s->small != small) continue;
        for (Block *b = s->first; b; b = b->next) {
            if (b->allocated || b->size < size) continue;
            if (!best || b->size < best->size || (b->size == best->size && b->ptr < best->ptr)) best = b;
        }
    }
    return best;
}

static void note(int kind, const Segment *s) {
    simtruth_event e = {kind, s->dev, s->tag, s->api, s->base, s->size};
    simtruth_push(&truth, e);
}

/* cudaMalloc (relaxed capture mode when the stream is capturing) or the pool's allocator. */
static int raw_malloc(int dev, int pool, uint64_t size, cudaStream_t stream, uint64_t *out) {
    if (pools[pool].m) {
        void *p = pools[pool].m((ssize_t)size, dev, stream);
        *out = (uint64_t)(uintptr_t)p;
        return p ? cudaSuccess : cudaErrorMemoryAllocation;
    }
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    int capturing = stream && cudaStreamIsCapturing(stream, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive;
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, size);
    if (capturing) cudaThreadExchangeStreamCaptureMode(&mode);
    if (rc != cudaSuccess) (void)cudaGetLastError(); /* handled: PyTorch clears it too */
    *out = (uint64_t)(uintptr_t)p;
    return rc;
}

static void release_segment(Segment *s) {
    if (pools[s->pool].f) {
        pools[s->pool].f((void *)(uintptr_t)s->base, (ssize_t)s->size, s->dev, NULL);
    } else {
        cudaFree((void *)(uintptr_t)s->base);
    }
    reserved[s->dev] -= s->size;
    note(SIMTRUTH_FREE, s);
    free(s->first);
    free(s);
}

/* Give back every fully free segment of `pool` on `dev` (-1: every device). */
static void release_cached(int dev, int pool) {
    Segment **pp = &segments;
    while (*pp) {
        Segment *s = *pp;
        int whole_free = s->first && !s->first->allocated && !s->first->next;
        if (whole_free && s->pool == pool && (dev < 0 || s->dev == dev)) {
            *pp = s->next;
            release_segment(s);
        } else {
            pp = &s->next;
        }
    }
}

int c10sim_malloc(uint64_t size, cudaStream_t stream, int tag, uint64_t *out) {
    if (!out) return cudaErrorInvalidValue;
    *out = 0;
    if (size == 0) return cudaSuccess;
    pthread_mutex_lock(&mu);
    int dev = current_device();
    int pool = active_pool[dev];
    uint64_t need = round_size(size);
    int small = need <= kSmallSize;
    Block *b = best_fit(dev, pool, small, need);
    int rc = cudaSuccess;
    if (!b) {
        uint64_t seg_size = allocation_size(need), base = 0;
        rc = raw_malloc(dev, pool, seg_size, stream, &base);
        if (rc != cudaSuccess) {
            release_cached(dev, 0);
            rc = raw_malloc(dev, pool, seg_size, stream, &base);
        }
        if (rc == cudaSuccess) {
            Segment *s = calloc(1, sizeof *s);
            b = calloc(1, sizeof *b);
            if (!s || !b) {
                free(s);
                free(b);
                pthread_mutex_unlock(&mu);
                return cudaErrorMemoryAllocation;
            }
            *s = (Segment){base, seg_size, dev, pool, small, tag,
                           pools[pool].m ? SIMTRUTH_API_CU_MEM_CREATE : SIMTRUTH_API_CUDA_MALLOC, b, segments};
            *b = (Block){base, seg_size, 0, NULL, NULL, s};
            segments = s;
            reserved[dev] += seg_size;
            if (reserved[dev] > reserved_peak[dev]) reserved_peak[dev] = reserved[dev];
            note(SIMTRUTH_ALLOC, s);
        }
    }
    if (b) {
        if (should_split(b, need)) {
            Block *rest = calloc(1, sizeof *rest);
            if (rest) {
                *rest = (Block){b->ptr + need, b->size - need, 0, b, b->next, b->seg};
                if (b->next) b->next->prev = rest;
                b->next = rest;
                b->size = need;
            }
        }
        b->allocated = 1;
        allocated[dev] += b->size;
        if (allocated[dev] > allocated_peak[dev]) allocated_peak[dev] = allocated[dev];
        *out = b->ptr;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

static Block *find_block(uint64_t ptr) {
    for (Segment *s = segments; s; s = s->next) {
        if (ptr < s->base || ptr >= s->base + s->size) continue;
        for (Block *b = s->first; b; b = b->next)
            if (b->ptr == ptr) return b;
    }
    return NULL;
}

int c10sim_free(uint64_t ptr) {
    if (!ptr) return cudaSuccess;
    pthread_mutex_lock(&mu);
    Block *b = find_block(ptr);
    if (!b || !b->allocated) {
        pthread_mutex_unlock(&mu);
        return cudaErrorInvalidValue;
    }
    b->allocated = 0;
    allocated[b->seg->dev] -= b->size;
    Block *n = b->next;
    if (n && !n->allocated) { /* merge the next block into b */
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        free(n);
    }
    Block *p = b->prev;
    if (p && !p->allocated) { /* merge b into the previous block */
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        free(b);
    }
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* torch.cuda.empty_cache(): fully free segments of the default pool, every device. */
int c10sim_empty_cache(void) {
    pthread_mutex_lock(&mu);
    release_cached(-1, 0);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* A private pool (graph pool or MemPool); malloc_fn/free_fn NULL: cudaMalloc/cudaFree. */
int c10sim_create_pool(void *malloc_fn, void *free_fn) {
    pthread_mutex_lock(&mu);
    int id = npools < MAX_POOLS ? npools++ : -1;
    if (id > 0) {
        pools[id].used = 1;
        pools[id].m = (plug_malloc_fn)malloc_fn;
        pools[id].f = (plug_free_fn)free_fn;
    }
    pthread_mutex_unlock(&mu);
    return id;
}

/* Route the current device's allocations to `pool` (0: back to the default pools). */
void c10sim_allocate_to_pool(int pool) {
    pthread_mutex_lock(&mu);
    int dev = current_device();
    active_pool[dev] = (pool > 0 && pool < npools) ? pool : 0;
    pthread_mutex_unlock(&mu);
}

/* The graphs that used a private pool are gone: give its free segments back. */
int c10sim_release_pool(int pool) {
    pthread_mutex_lock(&mu);
    if (pool > 0) release_cached(-1, pool);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* The segment containing ptr (what cuPointerGetAttribute(RANGE_START_ADDR) reports). */
int c10sim_segment_of(uint64_t ptr, uint64_t *base, uint64_t *size) {
    int found = 0;
    pthread_mutex_lock(&mu);
    for (Segment *s = segments; s && !found; s = s->next) {
        if (ptr >= s->base && ptr < s->base + s->size) {
            *base = s->base;
            *size = s->size;
            found = 1;
        }
    }
    pthread_mutex_unlock(&mu);
    return found;
}

/* allocated, allocated peak, reserved, reserved peak of a device. */
void c10sim_stats(int dev, uint64_t out[4]) {
    pthread_mutex_lock(&mu);
    if (dev >= 0 && dev < MAX_DEV) {
        out[0] = allocated[dev];
        out[1] = allocated_peak[dev];
        out[2] = reserved[dev];
        out[3] = reserved_peak[dev];
    }
    pthread_mutex_unlock(&mu);
}

void c10sim_reset_peak(int dev) {
    pthread_mutex_lock(&mu);
    if (dev >= 0 && dev < MAX_DEV) {
        allocated_peak[dev] = allocated[dev];
        reserved_peak[dev] = reserved[dev];
    }
    pthread_mutex_unlock(&mu);
}

int c10sim_drain(simtruth_event *out, int max) {
    pthread_mutex_lock(&mu);
    int n = simtruth_drain(&truth, out, max);
    pthread_mutex_unlock(&mu);
    return n;
}
