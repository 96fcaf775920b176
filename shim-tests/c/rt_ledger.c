/* Scenario for the interposer's tests: one program, one mode per behaviour. Each mode
 * prints `RESULT key=value` lines with what it did (byte counts it expects culedger to
 * report), then exits 0. Linked against the runtime (libcudart.so.12). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s -> %d (%s)\n", __FILE__, __LINE__, #call, (int)e_,   \
                    cudaGetErrorName(e_));                                                 \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* Whether DIR holds a report (culedger-*.json) whose name contains MARK. */
static int has_report(const char *dir, const char *mark) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        found = strncmp(e->d_name, "culedger-", 9) == 0 && n > 5 && strcmp(e->d_name + n - 5, ".json") == 0 &&
                strstr(e->d_name, mark) != NULL;
    }
    closedir(d);
    return found;
}

static void *dev_alloc(size_t n) {
    void *p = NULL;
    CHECK(cudaMalloc(&p, n));
    return p;
}

static int basic(void) {
    CHECK(cudaSetDevice(0));
    void *a = dev_alloc(1 * MiB), *b = dev_alloc(3 * MiB), *c = dev_alloc(64 * MiB);
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b));
    printf("RESULT probe_free=%zu probe_total=%zu\n", free_b, total_b);
    static char host[1 << 20];
    memset(host, 7, sizeof host);
    CHECK(cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(host, a, sizeof host, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(b));
    CHECK(cudaFree(NULL));
    cudaError_t bad = cudaFree((void *)(uintptr_t)0x1234);
    cudaGetLastError();
    printf("RESULT bad_free=%d\n", (int)bad);
    printf("RESULT live=%llu peak=%llu allocs=3 frees=1 h2d=%d\n", 65 * MiB, 68 * MiB, 1 << 20);
    (void)c;
    return 0;
}

static int multi(void) {
    CHECK(cudaSetDevice(0));
    dev_alloc(10 * MiB);
    CHECK(cudaSetDevice(1));
    dev_alloc(20 * MiB);
    dev_alloc(2 * MiB);
    size_t f, t;
    CHECK(cudaMemGetInfo(&f, &t));
    printf("RESULT dev0=%llu dev1=%llu\n", 10 * MiB, 22 * MiB);
    return 0;
}

struct worker {
    int id, iters;
    unsigned long long live;
};

static void *work(void *arg) {
    struct worker *w = arg;
    void *keep[64];
    int nkeep = 0;
    unsigned seed = 1234u + (unsigned)w->id;
    for (int i = 0; i < w->iters; i++) {
        size_t n = (size_t)(rand_r(&seed) % 4096 + 1) * 256;
        void *p = dev_alloc(n);
        if (i % 3 == 0 && nkeep < 64) {
            keep[nkeep++] = p;
            w->live += n;
        } else {
            CHECK(cudaFree(p));
        }
    }
    (void)keep;
    return NULL;
}

static int threads(int n, int iters) {
    CHECK(cudaSetDevice(0));
    pthread_t th[64];
    struct worker ws[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        ws[i] = (struct worker){.id = i, .iters = iters, .live = 0};
        pthread_create(&th[i], NULL, work, &ws[i]);
    }
    unsigned long long live = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        live += ws[i].live;
    }
    printf("RESULT live=%llu allocs=%d\n", live, n * iters);
    return 0;
}

static int oom(void) {
    CHECK(cudaSetDevice(0));
    dev_alloc(4 * MiB);
    size_t f, t;
    CHECK(cudaMemGetInfo(&f, &t));
    void *p = NULL;
    size_t want = t * 2;
    cudaError_t e = cudaMalloc(&p, want);
    cudaGetLastError();
    printf("RESULT oom_error=%d want=%zu probe_free=%zu\n", (int)e, want, f);
    return e == cudaErrorMemoryAllocation ? 0 : 1;
}

static int do_fork(int use_exit) {
    CHECK(cudaSetDevice(0));
    dev_alloc(6 * MiB);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* As with real CUDA, a forked child cannot use the context its parent initialised:
         * the allocation fails (cudaErrorInitializationError) and is recorded as a failure
         * in the child's own, empty ledger. */
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, 10 * MiB);
        printf("RESULT child_pid=%d child_rc=%d\n", (int)getpid(), (int)e);
        fflush(stdout);
        if (use_exit) exit(0);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    printf("RESULT parent_pid=%d child_status=%d parent_live=%llu child_want=%llu\n", (int)getpid(), st, 6 * MiB,
           10 * MiB);
    return 0;
}

static int pinned(void) {
    void *a = NULL, *b = NULL;
    CHECK(cudaMallocHost(&a, 2 * MiB));
    CHECK(cudaHostAlloc(&b, 3 * MiB, cudaHostAllocPortable));
    static char reg[1 << 20];
    CHECK(cudaHostRegister(reg, sizeof reg, cudaHostRegisterDefault));
    CHECK(cudaFreeHost(a));
    printf("RESULT pinned_live=%llu pinned_peak=%llu registered=%d\n", 3 * MiB, 5 * MiB, 1 << 20);
    return 0;
}

static int async(void) {
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void *a = NULL, *b = NULL, *c = NULL;
    CHECK(cudaMallocAsync(&a, 5 * MiB, s));
    CHECK(cudaMallocAsync(&b, 7 * MiB, cudaStreamPerThread));
    CHECK(cudaMallocAsync(&c, 1 * MiB, s));
    CHECK(cudaFreeAsync(c, s));
    CHECK(cudaFreeAsync(b, cudaStreamPerThread));
    printf("RESULT live=%llu peak=%llu\n", 5 * MiB, 13 * MiB);
    return 0;
}

static int graph(void) {
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    dev_alloc(2 * MiB);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    void *p = NULL;
    CHECK(cudaMalloc(&p, 4 * MiB)); /* relaxed mode: allowed, lands in the graph pool */
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g));
    dev_alloc(8 * MiB);
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaGraphExecDestroy(e));
    printf("RESULT captured=%llu other=%llu instantiations=1\n", 4 * MiB, 10 * MiB);
    return 0;
}

static int ipc(void) {
    CHECK(cudaSetDevice(0));
    void *a = dev_alloc(8 * MiB);
    dev_alloc(3 * MiB);
    cudaIpcMemHandle_t h;
    CHECK(cudaIpcGetMemHandle(&h, a));
    CHECK(cudaIpcGetMemHandle(&h, (char *)a + 4096)); /* same allocation again: counted once */
    printf("RESULT ipc=%llu other=%llu\n", 8 * MiB, 3 * MiB);
    return 0;
}

static int peer(void) {
    CHECK(cudaSetDevice(0));
    dev_alloc(2 * MiB);
    CHECK(cudaDeviceEnablePeerAccess(1, 0));
    printf("RESULT peer=1\n");
    return 0;
}

typedef CUresult (*alloc_v2_t)(CUdeviceptr *, size_t);

/* Driver entry points through the runtime (PyTorch's driver table, NCCL): the wrapper the
 * program gets must count the allocation once; the v1 ABI must come back untouched. */
static int entry(void) {
    CHECK(cudaSetDevice(0));
    void *fn = NULL, *v1 = NULL;
    enum cudaDriverEntryPointQueryResult st;
    CHECK(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st));
    CUdeviceptr p = 0;
    if (((alloc_v2_t)fn)(&p, 9 * MiB) != CUDA_SUCCESS) return 1;
    CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &st));
    if (((alloc_v2_t)fn)(&p, 1 * MiB) != CUDA_SUCCESS) return 1;
    CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &v1, 2000, cudaEnableDefault, &st));
    printf("RESULT live=%llu allocs=2 v1_distinct=%d\n", 10 * MiB, v1 != NULL && v1 != fn);
    return 0;
}

/* A signal handler that calls _exit while worker threads are inside allocation hooks (the
 * way servers end on SIGTERM): the process must end with the handler's status, never hang. */
static volatile int stop_workers;
static void on_usr1(int sig) {
    (void)sig;
    _exit(42);
}
static void *churn(void *arg) {
    (void)arg;
    while (!stop_workers) {
        void *p = NULL;
        if (cudaMalloc(&p, 4096) == cudaSuccess) cudaFree(p);
    }
    return NULL;
}
static int sigexit(void) {
    CHECK(cudaSetDevice(0));
    dev_alloc(2 * MiB);
    signal(SIGUSR1, on_usr1);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, churn, NULL);
    usleep(200 * 1000);
    /* The signal often lands inside culedger's bookkeeping, where the last periodic report
     * must stand: wait (at most 30 s) until there is one. Under emulation (qemu) or on a
     * loaded machine the first write can take longer than the 200 ms above. Reports are
     * named culedger-<host>-<pid>-<start>.json. */
    const char *out = getenv("CULEDGER_OUT");
    char mark[64];
    snprintf(mark, sizeof mark, "-%d-", (int)getpid());
    for (int i = 0; out && i < 3000 && !has_report(out, mark); i++) usleep(10 * 1000);
    for (int round = 0; round < 1000; round++) {
        pthread_kill(th[round % 4], SIGUSR1); /* lands inside a hook most of the time */
        usleep(1000);
    }
    return 1; /* not reached: the handler exits */
}

static int sleeper(void) {
    CHECK(cudaSetDevice(0));
    dev_alloc(12 * MiB);
    printf("READY\n");
    fflush(stdout);
    for (int i = 0; i < 600; i++) sleep(1);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    if (!strcmp(mode, "basic")) return basic();
    if (!strcmp(mode, "multi")) return multi();
    if (!strcmp(mode, "threads")) return threads(argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? atoi(argv[3]) : 200);
    if (!strcmp(mode, "oom")) return oom();
    if (!strcmp(mode, "fork")) return do_fork(1);
    if (!strcmp(mode, "fork_exit")) return do_fork(0);
    if (!strcmp(mode, "pinned")) return pinned();
    if (!strcmp(mode, "async")) return async();
    if (!strcmp(mode, "graph")) return graph();
    if (!strcmp(mode, "ipc")) return ipc();
    if (!strcmp(mode, "peer")) return peer();
    if (!strcmp(mode, "sleep")) return sleeper();
    if (!strcmp(mode, "entry")) return entry();
    if (!strcmp(mode, "sigexit")) return sigexit();
    if (!strcmp(mode, "nocuda")) {
        printf("RESULT nocuda=1\n");
        return 3;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
