/* Scenario for the report's process lifecycle: how a process ends (pthread_exit from main,
 * concurrent exit, signals at their default action or handled by the program, quick_exit,
 * exit statuses above 255) and how it replaces itself (every exec* form, a failing exec).
 * Each mode prints `RESULT key=value` lines with what it did; `READY` means "now signal me".
 * Linked against the runtime (libcudart.so.12). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim.h"

/* glibc has execveat since 2.34; the aarch64 build links against 2.17's symbols. Weak, so
 * the program still links there, and calls the wrapper (culedger's hook when preloaded)
 * wherever the running glibc has it. */
extern int execveat(int fd, const char *path, char *const argv[], char *const envp[], int flags)
    __attribute__((weak));

extern char **environ;

static void *dev_alloc(size_t n) {
    void *p = NULL;
    RT(cudaMalloc(&p, n));
    return p;
}

static void ready(void) {
    printf("READY\n");
    fflush(stdout);
}

static void sleep_forever(void) {
    for (;;) pause();
}

/* ---- main ends with pthread_exit -------------------------------------------------------- */

static void *late_worker(void *arg) {
    (void)arg;
    usleep(200 * 1000);
    dev_alloc(6 * MIB);
    RESULT("worker_done=1");
    return NULL;
}

static void *exiting_worker(void *arg) {
    (void)arg;
    usleep(200 * 1000);
    dev_alloc(6 * MIB);
    RESULT("worker_done=1");
    exit(4);
}

static int main_pthread_exit(int with_worker) {
    RT(cudaSetDevice(0));
    dev_alloc(10 * MIB);
    RESULT("live=%zu", (with_worker ? 16 : 10) * MIB);
    if (with_worker) {
        pthread_t t;
        EXPECT(pthread_create(&t, NULL, with_worker == 2 ? exiting_worker : late_worker, NULL) == 0);
    }
    pthread_exit(NULL);
}

/* ---- every program thread blocks SIGTERM and takes it with sigwait ------------------------ */

static void *idle_worker(void *arg) {
    (void)arg;
    dev_alloc(2 * MIB);
    sleep_forever();
    return NULL;
}

static int sigwaiter(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0);
    RT(cudaSetDevice(0));
    dev_alloc(4 * MIB);
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, idle_worker, NULL) == 0);
    usleep(100 * 1000);
    ready();
    int sig = 0;
    EXPECT(sigwait(&set, &sig) == 0);
    RESULT("got=%d", sig);
    exit(5);
}

/* ---- hold memory until a signal ends the process ------------------------------------------ */

static int hold(void) {
    RT(cudaSetDevice(0));
    dev_alloc(100 * MIB);
    dev_alloc(200 * MIB);
    RESULT("live=%zu", 300 * MIB);
    ready();
    sleep_forever();
    return 1;
}

/* ---- the program's own handler --------------------------------------------------------------- */

static volatile sig_atomic_t got_signal;
static void on_term(int sig) { got_signal = sig; }

/* The classic cleanup handler: restore the default and re-raise, so the process ends by the
 * signal. */
static void reraise(int sig) {
    signal(sig, SIG_DFL);
    raise(sig);
}

static int handler(const char *how) {
    RT(cudaSetDevice(0));
    dev_alloc(3 * MIB); /* culedger is active from here */
    struct sigaction q;
    memset(&q, 0, sizeof q);
    EXPECT(sigaction(SIGTERM, NULL, &q) == 0);
    RESULT("dfl_before=%d", q.sa_handler == SIG_DFL && !(q.sa_flags & SA_SIGINFO));
    void (*h)(int) = !strcmp(how, "reraise") ? reraise : on_term;
    if (!strcmp(how, "signal") || !strcmp(how, "reraise")) {
        void (*prev)(int) = signal(SIGTERM, h);
        RESULT("prev_dfl=%d", prev == SIG_DFL);
    } else {
        struct sigaction act, old;
        memset(&act, 0, sizeof act);
        memset(&old, 0, sizeof old);
        act.sa_handler = h;
        sigemptyset(&act.sa_mask);
        EXPECT(sigaction(SIGTERM, &act, &old) == 0);
        RESULT("prev_dfl=%d", old.sa_handler == SIG_DFL);
    }
    memset(&q, 0, sizeof q);
    EXPECT(sigaction(SIGTERM, NULL, &q) == 0);
    RESULT("own_after=%d", q.sa_handler == h);
    /* Setting the default explicitly reads back as the default. */
    void (*prev_int)(int) = signal(SIGINT, SIG_DFL);
    memset(&q, 0, sizeof q);
    EXPECT(sigaction(SIGINT, NULL, &q) == 0);
    RESULT("int_prev_dfl=%d int_now_dfl=%d", prev_int == SIG_DFL, q.sa_handler == SIG_DFL);
    ready();
    while (!got_signal) pause();
    RESULT("handled=%d", (int)got_signal);
    exit(7);
}

/* ---- every answer about a disposition, field for field ------------------------------------ */

static void h1(int sig) { got_signal = sig; }
static void h2(int sig) { got_signal = sig; }
static void (*glibc_restorer)(void);

static const char *handler_name(void (*h)(int)) {
    if (h == SIG_DFL) return "DFL";
    if (h == SIG_IGN) return "IGN";
    if (h == h1) return "h1";
    if (h == h2) return "h2";
    return "other";
}

/* One line per answer: handler, flags, the mask's signals 1..64, the restorer (the one glibc
 * puts in every sigaction it makes, none, or another). Run with and without culedger, the
 * lines must be the same. */
static void show(const char *what, int sig, const struct sigaction *q) {
    unsigned long long mask = 0;
    for (int s = 1; s <= 64; s++)
        if (sigismember(&q->sa_mask, s) == 1) mask |= 1ull << (s - 1);
    const char *restorer = q->sa_restorer == NULL ? "none" : q->sa_restorer == glibc_restorer ? "glibc" : "other";
    RESULT("%s sig=%d handler=%s flags=%#x mask=%#llx restorer=%s", what, sig, handler_name(q->sa_handler),
           (unsigned)q->sa_flags, mask, restorer);
}

static void query(const char *what, int sig) {
    struct sigaction q;
    memset(&q, 0x5a, sizeof q);
    EXPECT(sigaction(sig, NULL, &q) == 0);
    show(what, sig, &q);
}

static void set(const char *what, int sig, void (*h)(int), int flags, int masked) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    memset(&old, 0x5a, sizeof old);
    act.sa_handler = h;
    act.sa_flags = flags;
    sigemptyset(&act.sa_mask);
    if (masked) {
        sigaddset(&act.sa_mask, masked);
        sigaddset(&act.sa_mask, SIGKILL); /* the kernel never keeps these two */
        sigaddset(&act.sa_mask, SIGSTOP);
    }
    EXPECT(sigaction(sig, &act, &old) == 0);
    show(what, sig, &old);
    query(what, sig);
}

static void via(const char *what, int sig, sighandler_t (*fn)(int, sighandler_t), void (*h)(int)) {
    void (*prev)(int) = fn(sig, h);
    RESULT("%s sig=%d prev=%s", what, sig, handler_name(prev));
    query(what, sig);
}

/* siginterrupt is deprecated, not gone: programs still call it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static int interrupting(int sig, int on) { return siginterrupt(sig, on); }
#pragma GCC diagnostic pop

extern sighandler_t bsd_signal(int, sighandler_t);
extern sighandler_t sysv_signal(int, sighandler_t);

static int sigview(void) {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = h1;
    EXPECT(sigaction(SIGUSR2, &act, NULL) == 0);
    EXPECT(sigaction(SIGUSR2, NULL, &act) == 0);
    glibc_restorer = act.sa_restorer;
    RT(cudaSetDevice(0));
    dev_alloc(3 * MIB); /* culedger is active from here */
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        int s = sigs[i];
        query("start", s);
        via("signal-dfl", s, signal, SIG_DFL);
        set("sigaction-dfl", s, SIG_DFL, 0, 0);
        set("sigaction-dfl-masked", s, SIG_DFL, SA_NODEFER | SA_RESETHAND, SIGUSR1);
        via("sysv-dfl", s, sysv_signal, SIG_DFL);
        via("bsd-dfl", s, bsd_signal, SIG_DFL);
        EXPECT(interrupting(s, 1) == 0);
        query("interrupt-on", s);
        via("interrupt-signal-dfl", s, signal, SIG_DFL);
        via("interrupt-signal-h1", s, signal, h1);
        via("interrupt-bsd-h2", s, bsd_signal, h2);
        via("interrupt-back-dfl", s, signal, SIG_DFL);
        EXPECT(interrupting(s, 0) == 0);
        query("interrupt-off", s);
        via("signal-h1", s, signal, h1);
        via("sysv-h2", s, sysv_signal, h2);
        set("sigaction-h1", s, h1, SA_SIGINFO | SA_ONSTACK, SIGUSR1);
        via("signal-ign", s, signal, SIG_IGN);
        via("signal-dfl-again", s, signal, SIG_DFL);
        EXPECT(interrupting(s, 1) == 0);
        set("interrupt-sigaction-restart", s, SIG_DFL, SA_RESTART, 0);
        via("interrupt-signal-again", s, signal, SIG_DFL);
        EXPECT(interrupting(s, 0) == 0);
        query("end", s);
    }
    return 0;
}

/* siginterrupt, then a handler by signal(): a blocking read the signal interrupts fails with
 * EINTR instead of restarting. `when` is "before" or "after" CUDA is active. */
static int pipe_fds[2];
static pthread_t reader;
static void *term_then_write(void *arg) {
    (void)arg;
    usleep(200 * 1000);
    pthread_kill(reader, SIGTERM);
    usleep(1500 * 1000);
    EXPECT(write(pipe_fds[1], "x", 1) == 1);
    return NULL;
}

static int sigintr(const char *when) {
    int early = !strcmp(when, "before");
    if (early) EXPECT(interrupting(SIGTERM, 1) == 0);
    RT(cudaSetDevice(0));
    dev_alloc(3 * MIB);
    if (!early) EXPECT(interrupting(SIGTERM, 1) == 0);
    EXPECT(signal(SIGTERM, h1) != SIG_ERR);
    EXPECT(pipe(pipe_fds) == 0);
    reader = pthread_self();
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, term_then_write, NULL) == 0);
    char c;
    ssize_t n = read(pipe_fds[0], &c, 1);
    int err = errno;
    RESULT("read=%zd eintr=%d handled=%d", n, n < 0 && err == EINTR, (int)got_signal);
    pthread_join(t, NULL);
    return 0;
}

/* ---- several threads call exit() at once --------------------------------------------------- */

static pthread_barrier_t barrier;

static void *exiter(void *arg) {
    int code = (int)(intptr_t)arg;
    pthread_barrier_wait(&barrier);
    exit(code);
}

static int exit_race(int nthreads, int main_too) {
    RT(cudaSetDevice(0));
    dev_alloc(8 * MIB);
    RESULT("live=%zu", 8 * MIB);
    EXPECT(pthread_barrier_init(&barrier, NULL, (unsigned)nthreads + (main_too ? 1 : 0)) == 0);
    pthread_t t[16];
    for (int i = 0; i < nthreads && i < 16; i++)
        EXPECT(pthread_create(&t[i], NULL, exiter, (void *)(intptr_t)(10 + i)) == 0);
    if (main_too) {
        pthread_barrier_wait(&barrier);
        return 3; /* a return from main: glibc's own exit() */
    }
    sleep_forever();
    return 1;
}

/* ---- quick_exit and statuses above 255 --------------------------------------------------------- */

static void *quick_buf;
static void free_on_quick_exit(void) { cudaFree(quick_buf); }

static int do_quick_exit(void) {
    RT(cudaSetDevice(0));
    dev_alloc(8 * MIB);
    quick_buf = dev_alloc(2 * MIB);
    /* Registered after culedger's handler: runs before it, so the free is in the report. */
    EXPECT(at_quick_exit(free_on_quick_exit) == 0);
    RESULT("live=%zu", 8 * MIB);
    quick_exit(9);
}

static int big_status(int underscore) {
    RT(cudaSetDevice(0));
    dev_alloc(1 * MIB);
    fflush(stdout);
    if (underscore) _exit(300);
    exit(300);
}

/* ---- exec ---------------------------------------------------------------------------------- */

static int exec_child(void) {
    RT(cudaSetDevice(0));
    dev_alloc(20 * MIB);
    RESULT("child_pid=%d child_live=%zu", (int)getpid(), 20 * MIB);
    return 0;
}

static int do_exec(const char *how, const char *target, const char *self) {
    RT(cudaSetDevice(0));
    dev_alloc(100 * MIB);
    RESULT("parent_pid=%d parent_live=%zu", (int)getpid(), 100 * MIB);
    fflush(stdout);
    int to_true = !strcmp(target, "true");
    const char *path = to_true ? "/bin/true" : self;
    const char *file = to_true ? "true" : "rt_life"; /* found through PATH by the *p forms */
    char *args[] = {(char *)file, to_true ? NULL : (char *)"exec_child", NULL};
    if (!to_true) {
        /* The *p forms search PATH: put this program's directory first. */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", self);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        char path_env[8192];
        snprintf(path_env, sizeof path_env, "%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
        setenv("PATH", path_env, 1);
    }
    if (!strcmp(how, "execve")) execve(path, args, environ);
    else if (!strcmp(how, "execv")) execv(path, args);
    else if (!strcmp(how, "execvp")) execvp(file, args);
    else if (!strcmp(how, "execvpe")) execvpe(file, args, environ);
    else if (!strcmp(how, "execl")) execl(path, args[0], args[1], (char *)NULL);
    else if (!strcmp(how, "execle")) execle(path, args[0], args[1], (char *)NULL, environ);
    else if (!strcmp(how, "execlp")) execlp(file, args[0], args[1], (char *)NULL);
    else if (!strcmp(how, "fexecve")) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        EXPECT(fd >= 0);
        fexecve(fd, args, environ);
    } else if (!strcmp(how, "execveat")) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        EXPECT(fd >= 0);
        if (!execveat) FAIL("this glibc has no execveat");
        execveat(fd, "", args, environ, AT_EMPTY_PATH);
    } else FAIL("unknown exec form %s", how);
    FAIL("%s %s failed: %s", how, path, strerror(errno));
}

static void *churn(void *arg);

/* exec from a second thread while another one allocates without pause. */
static const char *exec_self;
static void *exec_from_thread(void *arg) {
    (void)arg;
    usleep(50 * 1000);
    char *args[] = {(char *)"rt_life", (char *)"exec_child", NULL};
    execv(exec_self, args);
    FAIL("execv from a thread failed: %s", strerror(errno));
}

static int exec_threaded(const char *self) {
    RT(cudaSetDevice(0));
    dev_alloc(100 * MIB);
    RESULT("parent_pid=%d parent_live=%zu", (int)getpid(), 100 * MIB);
    fflush(stdout);
    exec_self = self;
    pthread_t c, e;
    EXPECT(pthread_create(&c, NULL, churn, NULL) == 0);
    EXPECT(pthread_create(&e, NULL, exec_from_thread, NULL) == 0);
    sleep_forever();
    return 1;
}

/* execl with `n` arguments after argv[0] (0 to 130): the new image prints how many it got. */
#define A10(i) a[i], a[i + 1], a[i + 2], a[i + 3], a[i + 4], a[i + 5], a[i + 6], a[i + 7], a[i + 8], a[i + 9]
static int execl_many(const char *self, int n) {
    RT(cudaSetDevice(0));
    dev_alloc(1 * MIB);
    fflush(stdout);
    static char *a[140];
    static char words[140][16];
    a[0] = (char *)"count_args";
    for (int i = 1; i < 140; i++) {
        snprintf(words[i], sizeof words[i], "w%d", i);
        a[i] = i <= n ? words[i] : NULL;
    }
    /* Every slot passed; execl stops at the first NULL, after `n` of them. */
    execl(self, "rt_life", A10(0), A10(10), A10(20), A10(30), A10(40), A10(50), A10(60), A10(70), A10(80),
          A10(90), A10(100), A10(110), A10(120), a[130], a[131], (char *)NULL);
    FAIL("execl failed: %s", strerror(errno));
}

static int count_args(int argc, char **argv) {
    int ok = 1;
    for (int i = 2; i < argc; i++) {
        char want[16];
        snprintf(want, sizeof want, "w%d", i - 1);
        ok &= !strcmp(argv[i], want);
    }
    RESULT("args=%d in_order=%d", argc - 2, ok);
    return 0;
}

static int exec_fail(void) {
    RT(cudaSetDevice(0));
    dev_alloc(10 * MIB);
    char *args[] = {(char *)"nothing", NULL};
    int rc = execv("/nonexistent/culedger-no-such-program", args);
    int err = errno;
    dev_alloc(5 * MIB);
    RESULT("exec_rc=%d exec_errno=%d live=%zu", rc, err, 15 * MIB);
    return 0;
}

/* ---- fork with busy threads; posix_spawn, system, vfork ---------------------------------------- */

static volatile int stop_churn;
static void *churn(void *arg) {
    (void)arg;
    while (!stop_churn) {
        void *p = NULL;
        if (cudaMalloc(&p, 4096) == cudaSuccess) cudaFree(p);
    }
    return NULL;
}

static int fork_busy(int n) {
    RT(cudaSetDevice(0));
    dev_alloc(6 * MIB);
    pthread_t th[3];
    for (int i = 0; i < 3; i++) EXPECT(pthread_create(&th[i], NULL, churn, NULL) == 0);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        fflush(stdout);
        pid_t pid = fork();
        EXPECT(pid >= 0);
        if (pid == 0) {
            /* As with real CUDA, the child cannot use its parent's context: the allocation
             * fails and is the one record of the child's own ledger. */
            void *p = NULL;
            cudaError_t e = cudaMalloc(&p, 1 * MIB);
            int code = e == cudaSuccess ? 1 : 0;
            if (i % 2) _exit(code);
            exit(code);
        }
        int st = 0;
        EXPECT(waitpid(pid, &st, 0) == pid);
        ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    stop_churn = 1;
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    RESULT("parent_pid=%d forks=%d ok=%d live=%zu child_want=%zu", (int)getpid(), n, ok, 6 * MIB, 1 * MIB);
    return 0;
}

static int spawners(void) {
    RT(cudaSetDevice(0));
    dev_alloc(7 * MIB);
    int st = system("exit 3");
    RESULT("system=%d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    pid_t pid;
    char *targs[] = {(char *)"true", NULL};
    EXPECT(posix_spawn(&pid, "/bin/true", NULL, NULL, targs, environ) == 0);
    EXPECT(waitpid(pid, &st, 0) == pid);
    RESULT("posix_spawn=%d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    /* vfork children run in our memory: their exec and _exit must not touch our report. */
    pid = vfork();
    if (pid == 0) {
        execv("/bin/true", targs);
        _exit(127);
    }
    EXPECT(waitpid(pid, &st, 0) == pid);
    RESULT("vfork_exec=%d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    pid = vfork();
    if (pid == 0) _exit(5);
    EXPECT(waitpid(pid, &st, 0) == pid);
    RESULT("vfork_exit=%d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    dev_alloc(1 * MIB);
    RESULT("live=%zu", 8 * MIB);
    return 0;
}

/* Hold memory while three threads allocate and free without pause, the main thread blocking
 * the terminating signals: a process-directed signal goes to a worker, often inside a hook. */
static int churn_hold(void) {
    RT(cudaSetDevice(0));
    dev_alloc(32 * MIB);
    pthread_t th[3];
    for (int i = 0; i < 3; i++) EXPECT(pthread_create(&th[i], NULL, churn, NULL) == 0);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    EXPECT(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0);
    RESULT("live=%zu", 32 * MIB);
    usleep(50 * 1000);
    ready();
    sleep_forever();
    return 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    const char *arg = argc > 2 ? argv[2] : "";
    if (!strcmp(mode, "pthread_exit")) return main_pthread_exit(0);
    if (!strcmp(mode, "pthread_exit_worker")) return main_pthread_exit(1);
    if (!strcmp(mode, "pthread_exit_worker_exit4")) return main_pthread_exit(2);
    if (!strcmp(mode, "exec_threaded")) return exec_threaded(argv[0]);
    if (!strcmp(mode, "execl_many")) return execl_many(argv[0], atoi(arg));
    if (!strcmp(mode, "count_args")) return count_args(argc, argv);
    if (!strcmp(mode, "sigwait")) return sigwaiter();
    if (!strcmp(mode, "hold")) return hold();
    if (!strcmp(mode, "handler")) return handler(arg);
    if (!strcmp(mode, "sigview")) return sigview();
    if (!strcmp(mode, "sigintr")) return sigintr(arg);
    if (!strcmp(mode, "exit_race")) return exit_race(argc > 3 ? atoi(argv[3]) : 2, !strcmp(arg, "main"));
    if (!strcmp(mode, "quick_exit")) return do_quick_exit();
    if (!strcmp(mode, "exit300")) return big_status(0);
    if (!strcmp(mode, "_exit300")) return big_status(1);
    if (!strcmp(mode, "exec")) return do_exec(arg, argc > 3 ? argv[3] : "child", argv[0]);
    if (!strcmp(mode, "exec_child")) return exec_child();
    if (!strcmp(mode, "exec_fail")) return exec_fail();
    if (!strcmp(mode, "fork_busy")) return fork_busy(argc > 2 ? atoi(argv[2]) : 100);
    if (!strcmp(mode, "spawners")) return spawners();
    if (!strcmp(mode, "churn_hold")) return churn_hold();
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
