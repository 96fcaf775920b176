/* Workloads of `make bench` (driven by culedger_bench, shim-tests/scenarios/src/bin/culedger_bench.rs):
 * a program linked against the runtime (`libcudart.so.12`, the dynamic-runtime path), meant to
 * run over the minimal-cost driver (`target/sim/min`) with and without culedger preloaded.
 *
 *   bench_rt pair LIVE BATCHES BATCH       cudaMalloc+cudaFree pairs, LIVE allocations kept live
 *   bench_rt threads T ROUNDS PAIRS        T threads on devices t % 8, PAIRS pairs each per round
 *   bench_rt h2d|h2d_async LIVE BATCHES BATCH   64-byte host-to-device copies (cudaMemcpy/Async)
 *   bench_rt meminfo LIVE BATCHES BATCH    cudaMemGetInfo
 *   bench_rt dlsym|dlsym_default BATCHES BATCH   dlsym of a non-CUDA name on a handle / RTLD_DEFAULT
 *   bench_rt live N SITES                  N live allocations from SITES call sites; RSS growth;
 *                                          then exit(0) (the report's final write is timed outside)
 *   bench_rt churn N CHECKPOINTS          long run: N alloc+free pairs over 64 live slots, with queries,
 *                                          failed allocations, unknown frees, exports of untracked
 *                                          memory (warnings) and copies mixed in;
 *                                          resident bytes at CHECKPOINTS evenly spaced points
 *   bench_rt nocuda                        touches no CUDA: prints its thread count, exits
 *   bench_rt drv_pair LIVE BATCHES BATCH KIB   cuMemAlloc+cuMemFree pairs of KIB KiB from one call
 *                                          site, through entries resolved by cuGetProcAddress (as
 *                                          NCCL and nvcc-built code reach the driver)
 *   bench_rt drv_meminfo|drv_h2d LIVE BATCHES BATCH   cuMemGetInfo / a 64-byte cuMemcpyHtoD, likewise
 *
 * Timed modes print one `RESULT ns=<ns per operation>` per batch after one warm-up batch, in the
 * calling thread's CPU time; `threads` prints each round's wall time and the CPU time of its
 * threads. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim.h"

static uint64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Run `op` BATCH times per batch; one warm-up batch, then BATCHES timed ones. A batch is
 * timed in this thread's CPU time: on a shared machine the time the thread spends preempted
 * is not the cost of the calls (culedger's flush thread works on its own thread and time). */
static void timed(void (*op)(void), int batches, int batch) {
    for (int i = 0; i < batch; i++) op();
    for (int b = 0; b < batches; b++) {
        uint64_t t0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < batch; i++) op();
        uint64_t t1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        printf("RESULT ns=%.2f\n", (double)(t1 - t0) / batch);
    }
    fflush(stdout);
}

/* LIVE allocations of 64 KiB kept for the whole run: the ledger is not empty. */
static void **keep_live(int live) {
    RT(cudaSetDevice(0));
    void **p = calloc((size_t)live + 1, sizeof *p);
    for (int i = 0; i < live; i++) RT(cudaMalloc(&p[i], 64 << 10));
    return p;
}

/* 256 KiB: below CULEDGER_SITE_MIN (1 MiB), so the pair measures the hooks and the ledger; a
 * large allocation adds the capture of its call site, measured on its own (scripts/bench.sh). */
static void op_pair(void) {
    void *p = NULL;
    if (cudaMalloc(&p, 256 << 10) != cudaSuccess || cudaFree(p) != cudaSuccess) FAIL("pair failed");
}

static void *copy_dst;
static char copy_src[64];
static void op_h2d(void) {
    if (cudaMemcpy(copy_dst, copy_src, sizeof copy_src, cudaMemcpyHostToDevice) != cudaSuccess) FAIL("copy failed");
}
static void op_h2d_async(void) {
    if (cudaMemcpyAsync(copy_dst, copy_src, sizeof copy_src, cudaMemcpyHostToDevice, 0) != cudaSuccess)
        FAIL("copy failed");
}

static void op_meminfo(void) {
    size_t f, t;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) FAIL("meminfo failed");
}

static void *dl_handle;
static void op_dlsym(void) {
    if (!dlsym(dl_handle, "getpid")) FAIL("dlsym failed");
}

/* ---- the driver through cuGetProcAddress ------------------------------------------------------ */

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static CUresult (*drv_alloc)(CUdeviceptr *, size_t);
static CUresult (*drv_free)(CUdeviceptr);
static CUresult (*drv_info)(size_t *, size_t *);
static CUresult (*drv_h2d)(CUdeviceptr, const void *, size_t);
static size_t drv_bytes;
/* Not DRV(): this program does not link the driver (it is reached through dlopen only). */
#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) FAIL("%s: CUresult %d", #call, (int)r_); } while (0)
static CUdeviceptr drv_dst;

static void *resolve(get_proc_fn get, const char *name) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CU(get(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    if (!fn) FAIL("%s not resolved", name);
    return fn;
}

/* The driver's entries, looked up the way NCCL does: dlsym of the resolver only, then every
 * entry through it; a context current on device 0 and LIVE allocations of 64 KiB kept. */
static void drv_setup(int live) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) FAIL("dlopen libcuda.so.1: %s", dlerror());
    get_proc_fn get = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!get) FAIL("no cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))resolve(get, "cuInit");
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))resolve(get, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))resolve(get, "cuCtxSetCurrent");
    drv_alloc = (CUresult(*)(CUdeviceptr *, size_t))resolve(get, "cuMemAlloc");
    drv_free = (CUresult(*)(CUdeviceptr))resolve(get, "cuMemFree");
    drv_info = (CUresult(*)(size_t *, size_t *))resolve(get, "cuMemGetInfo");
    drv_h2d = (CUresult(*)(CUdeviceptr, const void *, size_t))resolve(get, "cuMemcpyHtoD");
    CUcontext ctx;
    CU(init(0));
    CU(retain(&ctx, 0));
    CU(set_current(ctx));
    for (int i = 0; i < live; i++) {
        CUdeviceptr p;
        CU(drv_alloc(&p, 64 << 10));
    }
}

/* One call site for every allocation (a server's weights and pools come from a few lines). */
static __attribute__((noinline)) void op_drv_pair(void) {
    CUdeviceptr p = 0;
    if (drv_alloc(&p, drv_bytes) != CUDA_SUCCESS || drv_free(p) != CUDA_SUCCESS) FAIL("pair failed");
}
static void op_drv_meminfo(void) {
    size_t f, t;
    if (drv_info(&f, &t) != CUDA_SUCCESS) FAIL("meminfo failed");
}
static void op_drv_h2d(void) {
    if (drv_h2d(drv_dst, copy_src, sizeof copy_src) != CUDA_SUCCESS) FAIL("copy failed");
}

/* Kernel launches in steady state: 64 kernels of one library, each launched once before the
 * timing (their first uses), then launched in rotation. */
#define LAUNCH_KERNELS 64
static CUresult (*drv_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                              void **, void **);
static CUkernel launch_kernels[LAUNCH_KERNELS];
static unsigned launch_next;
static void drv_launch_setup(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    get_proc_fn get = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
    CUresult (*load)(CUlibrary *, const void *, CUjit_option *, void **, unsigned, CUlibraryOption *, void **,
                     unsigned) = resolve(get, "cuLibraryLoadData");
    CUresult (*kernel)(CUkernel *, CUlibrary, const char *) = resolve(get, "cuLibraryGetKernel");
    drv_launch = resolve(get, "cuLaunchKernel");
    static const char image[64] = "fatbin";
    CUlibrary lib;
    CU(load(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    for (int i = 0; i < LAUNCH_KERNELS; i++) {
        char name[32];
        snprintf(name, sizeof name, "kernel_%d", i);
        CU(kernel(&launch_kernels[i], lib, name));
        CU(drv_launch((CUfunction)launch_kernels[i], 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    }
}
static void op_drv_launch(void) {
    CUkernel k = launch_kernels[launch_next++ % LAUNCH_KERNELS];
    if (drv_launch((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS) FAIL("launch failed");
}

/* ---- threads ---------------------------------------------------------------------------------- */

/* Each thread takes its own start and end time: with more threads than cores, the main thread
 * may be descheduled right after a barrier, so the phase is from the first start to the last end. */
static pthread_barrier_t start_line, finish_line;
static int thread_pairs, thread_rounds;
static uint64_t (*starts)[256], (*ends)[256], (*cpu)[256];

static void *thread_main(void *arg) {
    int id = (int)(intptr_t)arg;
    RT(cudaSetDevice(id % 8));
    for (int i = 0; i < 1000; i++) op_pair(); /* warm-up */
    for (int r = 0; r < thread_rounds; r++) {
        pthread_barrier_wait(&start_line);
        starts[r][id] = now_ns(CLOCK_MONOTONIC);
        uint64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < thread_pairs; i++) op_pair();
        cpu[r][id] = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        ends[r][id] = now_ns(CLOCK_MONOTONIC);
        pthread_barrier_wait(&finish_line);
    }
    return NULL;
}

static int threads(int n, int rounds, int pairs) {
    if (n < 1 || n > 256 || rounds < 1) FAIL("threads: 1..256 threads, 1 or more rounds");
    thread_pairs = pairs;
    thread_rounds = rounds;
    starts = calloc((size_t)rounds, sizeof *starts);
    ends = calloc((size_t)rounds, sizeof *ends);
    cpu = calloc((size_t)rounds, sizeof *cpu);
    pthread_barrier_init(&start_line, NULL, (unsigned)n + 1);
    pthread_barrier_init(&finish_line, NULL, (unsigned)n + 1);
    pthread_t th[256];
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, thread_main, (void *)(intptr_t)i);
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_wait(&start_line);
        pthread_barrier_wait(&finish_line);
        uint64_t first = UINT64_MAX, last = 0, cpu_ns = 0;
        for (int i = 0; i < n; i++) {
            if (starts[r][i] < first) first = starts[r][i];
            if (ends[r][i] > last) last = ends[r][i];
            cpu_ns += cpu[r][i];
        }
        printf("RESULT wall_ns=%llu cpu_ns=%llu pairs=%llu\n", (unsigned long long)(last - first),
               (unsigned long long)cpu_ns, (unsigned long long)n * (unsigned long long)pairs);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    return 0;
}

/* ---- live allocations from many call sites ----------------------------------------------------- */

/* 10,000 distinct functions, each a call site of cudaMalloc (each stores its own id, so no two
 * are identical and none can be folded into another). Call-site capture ([4]) sees SITES sites. */
static volatile int last_site;
#define SITE(n)                                                                                     \
    static __attribute__((noinline)) void *site_##n(size_t s) {                                     \
        void *p = NULL;                                                                             \
        last_site = 1##n;                                                                           \
        if (cudaMalloc(&p, s) != cudaSuccess) FAIL("cudaMalloc failed");                           \
        return p;                                                                                   \
    }
#define REF(n) site_##n,
#define D10(M, x) M(x##0) M(x##1) M(x##2) M(x##3) M(x##4) M(x##5) M(x##6) M(x##7) M(x##8) M(x##9)
#define D100(M, x) D10(M, x##0) D10(M, x##1) D10(M, x##2) D10(M, x##3) D10(M, x##4) \
    D10(M, x##5) D10(M, x##6) D10(M, x##7) D10(M, x##8) D10(M, x##9)
#define D1000(M, x) D100(M, x##0) D100(M, x##1) D100(M, x##2) D100(M, x##3) D100(M, x##4) \
    D100(M, x##5) D100(M, x##6) D100(M, x##7) D100(M, x##8) D100(M, x##9)
#define D10000(M) D1000(M, 0) D1000(M, 1) D1000(M, 2) D1000(M, 3) D1000(M, 4) \
    D1000(M, 5) D1000(M, 6) D1000(M, 7) D1000(M, 8) D1000(M, 9)
D10000(SITE)
static void *(*const SITES[])(size_t) = {D10000(REF)};
#define NSITES ((int)(sizeof SITES / sizeof SITES[0]))

static long resident_bytes(void) {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &pages, &rss) != 2) FAIL("cannot read /proc/self/statm");
    fclose(f);
    return rss * sysconf(_SC_PAGESIZE);
}

static int live(long n, int sites) {
    if (sites < 1 || sites > NSITES) FAIL("SITES must be 1..%d", NSITES);
    RT(cudaSetDevice(0));
    void *p = NULL;
    RT(cudaMalloc(&p, 4096)); /* runtime and interposer initialised before the first figure */
    RT(cudaFree(p));
    long before = resident_bytes();
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) SITES[i % sites](4096);
    uint64_t t1 = now_ns(CLOCK_MONOTONIC);
    long after = resident_bytes();
    printf("RESULT live=%ld sites=%d rss_before=%ld rss_after=%ld alloc_ns=%.2f\n", n, sites, before, after,
           (double)(t1 - t0) / (double)n);
    printf("RESULT t_exit_unix_ns=%llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
    fflush(stdout);
    exit(0);
}

static int churn(long n, int checkpoints) {
    RT(cudaSetDevice(0));
    void *slot[64] = {0};
    static char src[256];
    long every = checkpoints > 0 ? n / checkpoints : n + 1;
    for (long i = 0; i < n; i++) {
        void **s = &slot[i & 63];
        if (*s) RT(cudaFree(*s));
        RT(cudaMalloc(s, (size_t)(1 + (i & 255)) << 12));
        if ((i & 15) == 0) {
            size_t f, t;
            RT(cudaMemGetInfo(&f, &t));
        }
        if ((i & 1023) == 0) {
            void *p = NULL;
            if (cudaMalloc(&p, (size_t)1 << 50) == cudaSuccess) FAIL("a 1 PiB allocation succeeded");
            cudaGetLastError();
            cudaFree((void *)(uintptr_t)(0x1000 + (i & 0xffff) * 16)); /* never allocated */
            cudaGetLastError();
            /* An export of memory culedger does not track: a warning naming the pointer, each
             * one different (the minimal driver hands out a handle for any pointer). */
            cudaIpcMemHandle_t h;
            cudaIpcGetMemHandle(&h, (void *)(uintptr_t)(0x1000 + i));
            cudaGetLastError();
        }
        if ((i & 4095) == 0) RT(cudaMemcpy(*s, src, sizeof src, cudaMemcpyHostToDevice));
        if (every > 0 && (i + 1) % every == 0) {
            printf("RESULT at=%ld rss=%ld\n", i + 1, resident_bytes());
            fflush(stdout);
        }
    }
    return 0;
}

static int count_threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int a2 = argc > 2 ? atoi(argv[2]) : 0, a3 = argc > 3 ? atoi(argv[3]) : 0, a4 = argc > 4 ? atoi(argv[4]) : 0;
    if (!strcmp(mode, "pair")) {
        keep_live(a2);
        timed(op_pair, a3, a4);
    } else if (!strcmp(mode, "threads")) {
        return threads(a2, a3, a4);
    } else if (!strcmp(mode, "h2d") || !strcmp(mode, "h2d_async")) {
        keep_live(a2);
        RT(cudaMalloc(&copy_dst, 4096));
        timed(strcmp(mode, "h2d") ? op_h2d_async : op_h2d, a3, a4);
    } else if (!strcmp(mode, "meminfo")) {
        keep_live(a2);
        timed(op_meminfo, a3, a4);
    } else if (!strcmp(mode, "dlsym") || !strcmp(mode, "dlsym_default")) {
        dl_handle = strcmp(mode, "dlsym") ? RTLD_DEFAULT : dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        if (strcmp(mode, "dlsym_default") && !dl_handle) FAIL("libc.so.6 is not loaded");
        timed(op_dlsym, a2, a3);
    } else if (!strcmp(mode, "live")) {
        return live(argc > 2 ? atol(argv[2]) : 0, a3);
    } else if (!strcmp(mode, "churn")) {
        return churn(argc > 2 ? atol(argv[2]) : 0, a3);
    } else if (!strcmp(mode, "drv_pair")) {
        drv_setup(a2);
        drv_bytes = (size_t)(argc > 5 ? atol(argv[5]) : 2048) << 10;
        timed(op_drv_pair, a3, a4);
    } else if (!strcmp(mode, "drv_meminfo")) {
        drv_setup(a2);
        timed(op_drv_meminfo, a3, a4);
    } else if (!strcmp(mode, "drv_h2d")) {
        drv_setup(a2);
        CU(drv_alloc(&drv_dst, 4096));
        timed(op_drv_h2d, a3, a4);
    } else if (!strcmp(mode, "drv_launch")) {
        drv_setup(a2);
        drv_launch_setup();
        timed(op_drv_launch, a3, a4);
    } else if (!strcmp(mode, "nocuda")) {
        printf("RESULT threads=%d\n", count_threads());
    } else {
        FAIL("unknown mode '%s'", mode);
    }
    return 0;
}
