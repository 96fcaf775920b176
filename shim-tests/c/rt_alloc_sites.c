/* Large allocations (2 MiB, above CULEDGER_SITE_MIN) repeated from places whose frames are the
 * same size: culedger proves a repeated allocation site equal to one of the thread's previous
 * ones (src/sites/mod.rs `capture_alloc`) only when the frames provably match. Runs, on device 0:
 *   A A A B B B A A       two noinline functions with identical frames, called from one loop
 *   X Y X Y               one function reached through two callers (two frames up)
 *   then, from a second thread, A A (RESULT letter T)
 * Every allocation stays live. Prints, per allocation, RESULT alloc=<letter>:<pointer>, and
 * RESULT fn_a=, fn_b=, fn_mid= (offsets of those functions from the executable's load base),
 * fn_x=, fn_y=. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "sim.h"

#define BYTES (2u << 20)

static void note(char letter, void *p) { RESULT("alloc=%c:%lu", letter, (unsigned long)(uintptr_t)p); }

__attribute__((noinline)) void *alloc_a(void) {
    void *p = NULL;
    RT(cudaMalloc(&p, BYTES));
    return p;
}

__attribute__((noinline)) void *alloc_b(void) {
    void *p = NULL;
    RT(cudaMalloc(&p, BYTES));
    return p;
}

/* Reached from outer_x and outer_y: its own frame and the runtime's are the same for both. */
__attribute__((noinline)) void *alloc_mid(void) {
    void *p = NULL;
    RT(cudaMalloc(&p, BYTES));
    return p;
}

/* Not tail calls (the store after the call): each keeps its frame, so only the return
 * address into it differs between the two paths. */
static volatile int calls;
__attribute__((noinline)) void *outer_x(void) {
    void *p = alloc_mid();
    calls++;
    return p;
}
__attribute__((noinline)) void *outer_y(void) {
    void *p = alloc_mid();
    calls++;
    return p;
}

static volatile int thread_allocs = 2; /* volatile: one call instruction, not an unrolled two */
static void *thread_a(void *arg) {
    (void)arg;
    for (int i = 0; i < thread_allocs; i++) note('T', alloc_a());
    return NULL;
}

static uintptr_t offset_of(void *fn) {
    Dl_info info;
    if (!dladdr(fn, &info)) FAIL("dladdr");
    return (uintptr_t)fn - (uintptr_t)info.dli_fbase;
}

int main(void) {
    RT(cudaSetDevice(0));
    for (const char *p = "AAABBBAAXYXY"; *p; p++) {
        void *(*fn)(void) = *p == 'A' ? alloc_a : *p == 'B' ? alloc_b : *p == 'X' ? outer_x : outer_y;
        note(*p, fn());
    }
    pthread_t th;
    if (pthread_create(&th, NULL, thread_a, NULL)) FAIL("pthread_create");
    pthread_join(th, NULL);
    RESULT("fn_a=%lu", (unsigned long)offset_of((void *)alloc_a));
    RESULT("fn_b=%lu", (unsigned long)offset_of((void *)alloc_b));
    RESULT("fn_mid=%lu", (unsigned long)offset_of((void *)alloc_mid));
    RESULT("fn_x=%lu", (unsigned long)offset_of((void *)outer_x));
    RESULT("fn_y=%lu", (unsigned long)offset_of((void *)outer_y));
    return 0;
}
