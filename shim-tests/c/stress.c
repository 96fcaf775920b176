/* Stress scenario for shim-tests/scenarios/tests/stress.rs: THREADS threads doing, at random,
 * allocations (cudaMalloc, cudaMallocAsync), frees, host-to-device copies, IPC exports, stream
 * captures (with a stream-ordered allocation inside), free-memory queries, allocations that fail
 * and frees of pointers never allocated, across every device of the simulated machine; one
 * thread forks children (which try CUDA, then exit or _exit), forks children that exec this
 * program again (`stress exec-child`), and posix_spawns /bin/true; another thread sends SIGUSR1
 * to random workers all along, so signals land inside hooks.
 *
 *   stress THREADS OPS FORKS   (OPS per thread; FORKS forks of each kind)
 *   stress exec-child          one 1 MiB allocation, freed; exit 0
 *
 * At the end it prints the ground truth per device, counted by the program itself:
 *   RESULT dev=D allocs=.. frees=.. live=.. probes=.. failures=.. exported=.. exported_bytes=.. captures=..
 *   RESULT unknown_frees=.. signals=.. fork_child=PID... exec_child=PID... */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sim.h"

extern char **environ;

#define MAX_DEV 16
#define MAX_LIVE 48
#define MAX_THREADS 64

struct alloc {
    void *p;
    size_t n;
    int dev, exported, async;
};

struct counts {
    unsigned long long allocs, frees, live, probes, failures, exported, exported_bytes, captures;
};

struct worker {
    pthread_t th;
    int id, ops;
    unsigned seed;
    struct alloc live[MAX_LIVE];
    int nlive;
    cudaStream_t streams[MAX_DEV];
    struct counts dev[MAX_DEV];
    unsigned long long unknown_frees;
    atomic_int tid; /* 0 before the thread runs and after it is done */
};

static int ndev, nthreads;
static struct worker workers[MAX_THREADS];
static atomic_int running = 1;
static atomic_ullong signals_handled;
static int forks_each;
static pid_t fork_children[256], exec_children[256];
static int nfork, nexec;
static const char *self_path;

static void on_usr1(int sig) {
    (void)sig;
    atomic_fetch_add_explicit(&signals_handled, 1, memory_order_relaxed);
}

static unsigned rnd(struct worker *w) { return (unsigned)rand_r(&w->seed); }

static void set_device(int d) { RT(cudaSetDevice(d)); }

static cudaStream_t stream_of(struct worker *w, int d) {
    if (!w->streams[d]) RT(cudaStreamCreate(&w->streams[d]));
    return w->streams[d];
}

static void add_live(struct worker *w, void *p, size_t n, int d, int async) {
    w->live[w->nlive++] = (struct alloc){.p = p, .n = n, .dev = d, .exported = 0, .async = async};
    w->dev[d].allocs++;
    w->dev[d].live += n;
}

static void free_one(struct worker *w, int i, int async) {
    struct alloc a = w->live[i];
    set_device(a.dev);
    if (async)
        RT(cudaFreeAsync(a.p, cudaStreamPerThread));
    else
        RT(cudaFree(a.p));
    w->dev[a.dev].frees++;
    w->dev[a.dev].live -= a.n;
    w->live[i] = w->live[--w->nlive];
}

static void one_op(struct worker *w) {
    int d = (int)(rnd(w) % (unsigned)ndev);
    unsigned op = rnd(w) % 100;
    size_t n = (size_t)(1 + rnd(w) % 4096) * 256;
    if (op < 30 || w->nlive == 0) { /* allocate */
        if (w->nlive == MAX_LIVE) {
            free_one(w, (int)(rnd(w) % (unsigned)w->nlive), 0);
            return;
        }
        set_device(d);
        void *p = NULL;
        if (op % 2)
            RT(cudaMalloc(&p, n));
        else
            RT(cudaMallocAsync(&p, n, cudaStreamPerThread));
        add_live(w, p, n, d, op % 2 == 0);
    } else if (op < 55) { /* free */
        free_one(w, (int)(rnd(w) % (unsigned)w->nlive), op % 2);
    } else if (op < 65) { /* host-to-device copy into a live allocation */
        static const char src[256];
        struct alloc *a = &w->live[rnd(w) % (unsigned)w->nlive];
        set_device(a->dev);
        RT(cudaMemcpy(a->p, src, sizeof src < a->n ? sizeof src : a->n, cudaMemcpyHostToDevice));
    } else if (op < 72) { /* IPC export of a cudaMalloc allocation (counted once per allocation) */
        struct alloc *a = &w->live[rnd(w) % (unsigned)w->nlive];
        if (a->async) return; /* pool memory has no legacy IPC handle */
        set_device(a->dev);
        cudaIpcMemHandle_t h;
        RT(cudaIpcGetMemHandle(&h, a->p));
        if (!a->exported) {
            a->exported = 1;
            w->dev[a->dev].exported++;
            w->dev[a->dev].exported_bytes += a->n;
        }
    } else if (op < 78) { /* capture with a stream-ordered allocation inside, freed afterwards */
        set_device(d);
        cudaStream_t s = stream_of(w, d);
        RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        w->dev[d].captures++;
        void *p = NULL;
        RT(cudaMallocAsync(&p, n, s));
        cudaGraph_t g;
        RT(cudaStreamEndCapture(s, &g));
        RT(cudaGraphDestroy(g));
        if (w->nlive == MAX_LIVE) free_one(w, 0, 0);
        add_live(w, p, n, d, 1);
    } else if (op < 93) { /* free-memory query */
        set_device(d);
        size_t f, t;
        RT(cudaMemGetInfo(&f, &t));
        w->dev[d].probes++;
    } else if (op < 96) { /* an allocation that cannot fit */
        set_device(d);
        void *p = NULL;
        if (cudaMalloc(&p, (size_t)1 << 44) != cudaErrorMemoryAllocation) FAIL("a 16 TiB allocation did not fail");
        cudaGetLastError();
        w->dev[d].failures++;
    } else { /* a free of a pointer never allocated */
        set_device(d);
        if (cudaFree((void *)(uintptr_t)(0x1000 + 16 * (rnd(w) % 4096))) == cudaSuccess) FAIL("bogus free succeeded");
        cudaGetLastError();
        w->unknown_frees++;
    }
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    atomic_store(&w->tid, (int)syscall(SYS_gettid));
    for (int i = 0; i < w->ops; i++) one_op(w);
    atomic_store(&w->tid, 0);
    return NULL;
}

static void *signaller(void *arg) {
    (void)arg;
    unsigned seed = 99;
    struct timespec pause = {0, 50 * 1000};
    while (atomic_load(&running)) {
        /* tgkill, not pthread_kill: a worker may be gone (ESRCH is harmless). */
        for (int k = 0; k < 4; k++) {
            int tid = atomic_load(&workers[rand_r(&seed) % (unsigned)nthreads].tid);
            if (tid) syscall(SYS_tgkill, getpid(), tid, SIGUSR1);
        }
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* Fork children while the workers run: some try CUDA (it fails in a child forked after
 * initialisation, as with real CUDA) and exit with exit() or _exit(); some exec this program
 * again; and /bin/true is started with posix_spawn (a vfork-like child). */
static void *forker(void *arg) {
    (void)arg;
    /* This thread's context is bound before any fork, so a child's first call does not need the
     * runtime's context table, whose lock a worker may hold at the moment of the fork. */
    set_device(0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    for (int i = 0; i < forks_each; i++) {
        nanosleep(&pause, NULL);
        pid_t pid = fork();
        if (pid == 0) {
            void *p = NULL;
            cudaError_t e = cudaMalloc(&p, 3 * MIB);
            if (i % 2) exit(e == cudaSuccess ? 9 : 0);
            _exit(e == cudaSuccess ? 9 : 0);
        }
        if (pid < 0) FAIL("fork failed");
        fork_children[nfork++] = pid;
        pid = fork();
        if (pid == 0) {
            execl(self_path, self_path, "exec-child", (char *)NULL);
            _exit(127);
        }
        if (pid < 0) FAIL("fork failed");
        exec_children[nexec++] = pid;
        char *argv[] = {"true", NULL};
        pid_t sp;
        if (posix_spawn(&sp, "/bin/true", NULL, NULL, argv, environ) != 0) FAIL("posix_spawn failed");
        int st;
        if (waitpid(sp, &st, 0) != sp || !WIFEXITED(st) || WEXITSTATUS(st) != 0) FAIL("/bin/true failed");
    }
    for (int i = 0; i < nfork; i++) {
        int st;
        if (waitpid(fork_children[i], &st, 0) != fork_children[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            FAIL("fork child %d failed (status %d)", (int)fork_children[i], st);
    }
    for (int i = 0; i < nexec; i++) {
        int st;
        if (waitpid(exec_children[i], &st, 0) != exec_children[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            FAIL("exec child %d failed (status %d)", (int)exec_children[i], st);
    }
    return NULL;
}

static int exec_child(void) {
    void *p = NULL;
    RT(cudaMalloc(&p, MIB));
    RT(cudaFree(p));
    return 0;
}

int main(int argc, char **argv) {
    self_path = argv[0];
    if (argc > 1 && !strcmp(argv[1], "exec-child")) return exec_child();
    if (argc < 4) FAIL("usage: stress THREADS OPS FORKS | stress exec-child");
    nthreads = atoi(argv[1]);
    int ops = atoi(argv[2]);
    forks_each = atoi(argv[3]);
    if (nthreads < 1 || nthreads > MAX_THREADS || forks_each < 0 || forks_each > 256) FAIL("bad arguments");
    RT(cudaGetDeviceCount(&ndev));
    if (ndev > MAX_DEV) ndev = MAX_DEV;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART: interrupted system calls see EINTR */
    sigaction(SIGUSR1, &sa, NULL);

    for (int i = 0; i < nthreads; i++) {
        workers[i].id = i;
        workers[i].ops = ops;
        workers[i].seed = 1000u + (unsigned)i;
        if (pthread_create(&workers[i].th, NULL, worker_main, &workers[i])) FAIL("pthread_create");
    }
    pthread_t sig_th, fork_th;
    pthread_create(&sig_th, NULL, signaller, NULL);
    pthread_create(&fork_th, NULL, forker, NULL);
    for (int i = 0; i < nthreads; i++) pthread_join(workers[i].th, NULL);
    pthread_join(fork_th, NULL);
    atomic_store(&running, 0);
    pthread_join(sig_th, NULL);

    unsigned long long unknown = 0;
    for (int d = 0; d < ndev; d++) {
        struct counts c = {0};
        for (int i = 0; i < nthreads; i++) {
            struct counts *t = &workers[i].dev[d];
            c.allocs += t->allocs, c.frees += t->frees, c.live += t->live, c.probes += t->probes;
            c.failures += t->failures, c.exported += t->exported, c.exported_bytes += t->exported_bytes;
            c.captures += t->captures;
        }
        printf("RESULT dev=%d allocs=%llu frees=%llu live=%llu probes=%llu failures=%llu exported=%llu "
               "exported_bytes=%llu captures=%llu\n",
               d, c.allocs, c.frees, c.live, c.probes, c.failures, c.exported, c.exported_bytes, c.captures);
    }
    for (int i = 0; i < nthreads; i++) unknown += workers[i].unknown_frees;
    printf("RESULT unknown_frees=%llu signals=%llu\n", unknown, (unsigned long long)atomic_load(&signals_handled));
    for (int i = 0; i < nfork; i++) printf("RESULT fork_child=%d\n", (int)fork_children[i]);
    for (int i = 0; i < nexec; i++) printf("RESULT exec_child=%d\n", (int)exec_children[i]);
    return 0;
}
