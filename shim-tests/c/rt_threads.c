/* Thread safety: N threads, each on its own device (thread-local cudaSetDevice), allocate and free
 * M times with cudaMalloc and cudaMallocAsync on the per-thread stream. Usage must return to the
 * per-device baseline. Usage: rt_threads [threads] [iterations].
 * RESULT keys: threads iterations errors device_mismatch leak_dev<i> main_device */
#include <pthread.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "sim.h"

static int n_dev = 1, iters = 50;

struct job { int index; int errors; int device_mismatch; };

static void *worker(void *arg) {
    struct job *j = arg;
    int dev = j->index % n_dev, seen = -1;
    if (cudaSetDevice(dev) != cudaSuccess) { j->errors++; return NULL; }
    for (int i = 0; i < iters; i++) {
        void *p = NULL, *q = NULL;
        size_t size = ((size_t)(i % 7) + 1) * MIB / 2; /* 0.5 .. 3.5 MiB */
        if (cudaMalloc(&p, size) != cudaSuccess) j->errors++;
        if (cudaMallocAsync(&q, size, cudaStreamPerThread) != cudaSuccess) j->errors++;
        if (cudaFreeAsync(q, cudaStreamPerThread) != cudaSuccess) j->errors++;
        if (cudaFree(p) != cudaSuccess) j->errors++;
        if (cudaGetDevice(&seen) != cudaSuccess || seen != dev) j->device_mismatch++;
    }
    if (cudaGetLastError() != cudaSuccess) j->errors++;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    iters = argc > 2 ? atoi(argv[2]) : 50;
    if (threads < 1 || threads > 256 || iters < 1) FAIL("usage: rt_threads [1..256 threads] [iterations]");
    RT(cudaGetDeviceCount(&n_dev));
    if (n_dev > threads) n_dev = threads;

    /* Baseline after each used device's primary context exists. */
    size_t base[256], t = 0;
    for (int d = 0; d < n_dev; d++) { RT(cudaSetDevice(d)); RT(cudaMemGetInfo(&base[d], &t)); }
    RT(cudaSetDevice(0));

    pthread_t tid[256];
    struct job jobs[256];
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){ .index = i };
        if (pthread_create(&tid[i], NULL, worker, &jobs[i]) != 0) FAIL("pthread_create");
    }
    int errors = 0, mismatch = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        errors += jobs[i].errors;
        mismatch += jobs[i].device_mismatch;
    }
    int main_dev = -1;
    RT(cudaGetDevice(&main_dev));
    RESULT("threads=%d iterations=%d errors=%d device_mismatch=%d main_device=%d devices=%d",
           threads, iters, errors, mismatch, main_dev, n_dev);
    for (int d = 0; d < n_dev; d++) {
        size_t f = 0;
        RT(cudaSetDevice(d));
        RT(cudaDeviceSynchronize());
        RT(cudaMemGetInfo(&f, &t));
        RESULT("leak_dev%d=%lld", d, (long long)base[d] - (long long)f);
    }
    return 0;
}
