/* The moments that matter, then SIGKILL: what a launcher does to its workers (SGLang's
 * kill_process_tree within a second of a scheduler's exception, vLLM's shutdown).
 * Usage: rt_sigkill MODE [N]
 *   fail       weights (512 MiB), a free-memory query, a pool of 3/4 of what it told, then an
 *              allocation larger than the device fails; prints FAILED and SIGKILLs itself as
 *              soon as the failing call has returned.
 *   fail-wait  the same, but prints FAILED and waits for its parent's SIGKILL.
 *   ipc        weights, then cudaIpcOpenMemHandle on a handle nobody exported fails; prints
 *              FAILED and SIGKILLs itself.
 *   dlopen     weights and the free-memory query, then dlopen of libctor_oom.so, whose
 *              constructor fails an allocation of 1 PiB and SIGKILLs the process as soon as
 *              the failing call has returned (inside dlopen: the loader's lock held).
 *   pool       weights, the free-memory query, the pool; prints POOL and waits for its parent's
 *              SIGKILL (the parent gives it tens of milliseconds).
 *   storm N    what a server's worker does before its launcher kills it: weights, the
 *              free-memory query, the pool, then N allocations of 1 MiB, one per millisecond
 *              (the sizing window writes all along), then an allocation larger than the
 *              device fails, half of the N are freed and it is retried (a caching allocator
 *              releasing its cache), fails again; SIGKILLs itself as soon as the retry has
 *              returned. Several at once on busy cores: `sigkill.rs`.
 *   loop N     N allocations larger than the device, each failing, then a normal exit.
 *   window N Q  (for `make bench`) a free-memory query when Q is 1, then N allocations of
 *              1 MiB, one per millisecond, all freed; the process's CPU time.
 * RESULT keys: told pool error (fail*, ipc), failures ns_per_call (loop: the loop's wall time
 * per call, after one failure outside it), cpu_ns (window). */
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "sim.h"

static void *weights;
static size_t told, total;

static void weights_and_query(void) {
    RT(cudaSetDevice(0));
    RT(cudaMalloc(&weights, 512 * MIB));
    RT(cudaMemGetInfo(&told, &total));
}

static size_t pool(void) {
    void *p = NULL;
    size_t bytes = told / 4 * 3;
    RT(cudaMalloc(&p, bytes));
    return bytes;
}

static long long ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void say(const char *what) {
    printf("%s\n", what);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) FAIL("usage: rt_sigkill fail|fail-wait|ipc|dlopen|pool|storm N|loop N|window N Q");
    const char *mode = argv[1];
    if (!strcmp(mode, "fail") || !strcmp(mode, "fail-wait")) {
        weights_and_query();
        size_t bytes = pool();
        void *q = NULL;
        cudaError_t e = cudaMalloc(&q, 2 * total);
        if (!strcmp(mode, "fail")) kill(getpid(), SIGKILL);
        RESULT("told=%zu pool=%zu error=%d", told, bytes, (int)e);
        say("FAILED");
        for (;;) pause();
    }
    if (!strcmp(mode, "storm") && argc > 2) {
        long n = strtol(argv[2], NULL, 10);
        weights_and_query();
        (void)pool();
        void **ps = calloc((size_t)n, sizeof *ps);
        for (long i = 0; i < n; i++) {
            RT(cudaMalloc(&ps[i], MIB));
            usleep(1000);
        }
        void *q = NULL;
        if (cudaMalloc(&q, 2 * total) == cudaSuccess) FAIL("an allocation twice the device succeeded");
        for (long i = 0; i < n / 2; i++) RT(cudaFree(ps[i]));
        (void)cudaGetLastError();
        cudaError_t e = cudaMalloc(&q, 2 * total);
        kill(getpid(), SIGKILL);
        FAIL("the retry returned %d and SIGKILL did not end the process", (int)e);
    }
    if (!strcmp(mode, "ipc")) {
        weights_and_query();
        cudaIpcMemHandle_t h;
        memset(&h, 0x5a, sizeof h);
        void *q = NULL;
        cudaError_t e = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) kill(getpid(), SIGKILL);
        FAIL("opening a handle nobody exported succeeded");
    }
    if (!strcmp(mode, "dlopen")) {
        weights_and_query();
        void *lib = dlopen("libctor_oom.so", RTLD_NOW);
        FAIL("dlopen of libctor_oom.so returned (%p: %s)", lib, lib ? "its constructor did not end the process" : dlerror());
    }
    if (!strcmp(mode, "pool")) {
        weights_and_query();
        size_t bytes = pool();
        RESULT("told=%zu pool=%zu", told, bytes);
        say("POOL");
        for (;;) pause();
    }
    if (!strcmp(mode, "loop") && argc > 2) {
        long n = strtol(argv[2], NULL, 10), failures = 0;
        RT(cudaSetDevice(0));
        RT(cudaMemGetInfo(&told, &total));
        void *q = NULL;
        if (cudaMalloc(&q, 2 * total) != cudaSuccess) failures++;
        long long t0 = ns(CLOCK_MONOTONIC);
        for (long i = 1; i < n; i++) {
            if (cudaMalloc(&q, 2 * total) != cudaSuccess) failures++;
        }
        long long t1 = ns(CLOCK_MONOTONIC);
        (void)cudaGetLastError();
        RESULT("failures=%ld ns_per_call=%lld", failures, n > 1 ? (t1 - t0) / (n - 1) : 0);
        return 0;
    }
    if (!strcmp(mode, "window") && argc > 3) {
        long n = strtol(argv[2], NULL, 10);
        RT(cudaSetDevice(0));
        void *first = NULL;
        RT(cudaMalloc(&first, MIB));
        if (atoi(argv[3]) == 1) RT(cudaMemGetInfo(&told, &total));
        void **ps = calloc((size_t)n, sizeof *ps);
        for (long i = 0; i < n; i++) {
            RT(cudaMalloc(&ps[i], MIB));
            usleep(1000);
        }
        for (long i = 0; i < n; i++) RT(cudaFree(ps[i]));
        free(ps);
        RT(cudaFree(first));
        RESULT("cpu_ns=%lld", ns(CLOCK_PROCESS_CPUTIME_ID));
        return 0;
    }
    FAIL("unknown mode %s", mode);
}
