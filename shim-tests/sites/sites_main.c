/* A non-Python program for tests/call_sites.rs:
 *   sites_main static LIBSTATICRT   allocates through libstaticrt's own driver path
 *   sites_main ctor LIBCTOR         dlopens a library that allocates in its constructor, then
 *                                   allocates from main (native frames again)
 *   sites_main small BYTES          one cudaMalloc of BYTES
 * RESULT lines: ptr (hex) of each allocation, rc. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cudaMalloc(void **p, size_t n);

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (strcmp(argv[1], "small") == 0) {
        void *p = NULL;
        int rc = cudaMalloc(&p, (size_t)strtoull(argv[2], NULL, 10));
        printf("RESULT rc=%d ptr=%p\n", rc, p);
        return rc;
    }
    void *h = dlopen(argv[2], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", argv[2], dlerror());
        return 2;
    }
    if (strcmp(argv[1], "static") == 0) {
        int (*f)(size_t, unsigned long long *) = (int (*)(size_t, unsigned long long *))dlsym(h, "staticrt_alloc");
        unsigned long long p = 0;
        int rc = f ? f(8u << 20, &p) : -1;
        printf("RESULT static_rc=%d static_ptr=0x%llx\n", rc, p);
        return rc == 0 ? 0 : 1;
    }
    if (strcmp(argv[1], "ctor") == 0) {
        int *rc = (int *)dlsym(h, "ctorlib_rc");
        void **p = (void **)dlsym(h, "ctorlib_ptr");
        printf("RESULT ctor_rc=%d ctor_ptr=%p\n", rc ? *rc : -1, p ? *p : NULL);
        void *q = NULL;
        int rc2 = cudaMalloc(&q, 4u << 20);
        printf("RESULT main_rc=%d main_ptr=%p\n", rc2, q);
        return rc2 == 0 ? 0 : 1;
    }
    return 2;
}
