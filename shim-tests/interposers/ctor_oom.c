/* A library whose constructor allocates more device memory than there is (a plugin setting up
 * its GPU state as it is loaded) and SIGKILLs its process the instant cudaMalloc has returned:
 * a failed allocation inside dlopen, with the loader's lock held (`rt_sigkill dlopen`,
 * sigkill.rs). cudaMalloc is found in the process (the program links the runtime). */
#include <dlfcn.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>

typedef int (*cuda_malloc_fn)(void **, size_t);

__attribute__((constructor)) static void allocate_too_much_and_die(void) {
    cuda_malloc_fn cuda_malloc = (cuda_malloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
    if (!cuda_malloc) return;
    void *p = NULL;
    (void)cuda_malloc(&p, (size_t)1 << 50);
    kill(getpid(), SIGKILL);
}
