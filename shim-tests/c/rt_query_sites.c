/* Free-memory queries repeated from two places whose frames are the same size: the call sites
 * culedger gives them (it reuses a thread's previous site only when the frames provably
 * match, src/sites/mod.rs `capture_repeat`). Runs, on device 0:
 *   A A A B B B A A   then, from a second thread, A
 * where A and B are two noinline functions with identical frames, called from the same loop (so
 * the stack pointer at the hook is the same for both, and so is every frame above them).
 * Prints RESULT fn_a=<offset of query_a from the executable's load base>, fn_b likewise, and
 * pattern=<the letters, in order>. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "sim.h"

static volatile size_t sink;

__attribute__((noinline)) void query_a(void) {
    size_t f = 0, t = 0;
    RT(cudaMemGetInfo(&f, &t));
    sink += f;
}

__attribute__((noinline)) void query_b(void) {
    size_t f = 0, t = 0;
    RT(cudaMemGetInfo(&f, &t));
    sink += f;
}

static void *thread_a(void *arg) {
    (void)arg;
    query_a();
    return NULL;
}

static uintptr_t offset_of(void (*fn)(void)) {
    Dl_info info;
    if (!dladdr((void *)fn, &info)) FAIL("dladdr");
    return (uintptr_t)fn - (uintptr_t)info.dli_fbase;
}

int main(void) {
    RT(cudaSetDevice(0));
    const char *pattern = "AAABBBAA";
    for (const char *p = pattern; *p; p++) {
        void (*fn)(void) = *p == 'A' ? query_a : query_b;
        fn();
    }
    pthread_t th;
    if (pthread_create(&th, NULL, thread_a, NULL)) FAIL("pthread_create");
    pthread_join(th, NULL);
    RESULT("fn_a=%lu", (unsigned long)offset_of(query_a));
    RESULT("fn_b=%lu", (unsigned long)offset_of(query_b));
    RESULT("pattern=%sA", pattern);
    return 0;
}
