/* Explicit tags from C: culedger_push_tag/culedger_pop_tag looked up weakly (dlsym on
 * RTLD_DEFAULT), so the program runs the same without culedger. On device 0:
 *   3 MiB under "kv_pool", 5 MiB and 64 KiB under "lora_c" (a category of the program's own),
 *   7 MiB untagged.
 * RESULT keys: active (the tag functions were found), depth (after the two pushes), done. */
#include <dlfcn.h>
#include <cuda_runtime_api.h>
#include "sim.h"

int main(void) {
    int (*push)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "culedger_push_tag");
    int (*pop)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "culedger_pop_tag");
    void *p = NULL;
    int depth = 0;
    RT(cudaSetDevice(0));
    if (push) push("kv_pool");
    RT(cudaMalloc(&p, 3 * MIB));
    if (push) depth = push("lora_c");
    RT(cudaMalloc(&p, 5 * MIB));
    RT(cudaMalloc(&p, 64 << 10));
    if (pop) pop();
    if (pop) pop();
    RT(cudaMalloc(&p, 7 * MIB));
    RESULT("active=%d depth=%d done=1", push != NULL && pop != NULL, depth);
    return 0;
}
