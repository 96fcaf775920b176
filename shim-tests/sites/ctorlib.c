/* A library that allocates from its constructor, i.e. inside dlopen (the loader lock held):
 * culedger must not unwind there. tests/call_sites.rs. */
#include <stddef.h>

int cudaMalloc(void **p, size_t n);

void *ctorlib_ptr;
int ctorlib_rc = -1;

__attribute__((constructor)) static void ctorlib_init(void) { ctorlib_rc = cudaMalloc(&ctorlib_ptr, 3u << 20); }
