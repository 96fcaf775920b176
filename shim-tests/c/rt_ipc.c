/* Cross-process IPC: the parent allocates and exports a handle, a child process (this program
 * re-executed with `--child HEX`) opens it on another device with cudaIpcMemLazyEnablePeerAccess,
 * copies from it and closes it. After the parent frees the buffer, a second child must fail to
 * open the stale handle.
 * RESULT keys: parent_ptr handle_hex self_open_error child_open_error child_ptr child_device
 *              child_close_error garbage_open_error stale_open_error child_status stale_status */
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cuda_runtime_api.h>
#include "sim.h"

static void to_hex(const cudaIpcMemHandle_t *h, char *out) {
    const unsigned char *b = (const unsigned char *)h->reserved;
    for (int i = 0; i < CUDA_IPC_HANDLE_SIZE; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static int from_hex(const char *s, cudaIpcMemHandle_t *h) {
    if (strlen(s) != 2 * CUDA_IPC_HANDLE_SIZE) return -1;
    for (int i = 0; i < CUDA_IPC_HANDLE_SIZE; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        h->reserved[i] = (char)v;
    }
    return 0;
}

/* Child: open, use, close. `prefix` names its RESULT keys. */
static int child(const char *hex, const char *prefix) {
    cudaIpcMemHandle_t h;
    if (from_hex(hex, &h) != 0) FAIL("bad handle hex");
    int n = 0;
    RT(cudaGetDeviceCount(&n));
    int dev = n > 1 ? 1 : 0;
    RT(cudaSetDevice(dev));
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    RESULT("%s_open_error=%d %s_device=%d", prefix, (int)e, prefix, dev);
    if (e != cudaSuccess) return 0;
    RESULT("%s_ptr=0x%lx", prefix, (unsigned long)(uintptr_t)p);
    char buf[256];
    RT(cudaMemcpy(buf, p, sizeof buf, cudaMemcpyDeviceToHost));
    RESULT("%s_close_error=%d", prefix, (int)cudaIpcCloseMemHandle(p));
    RESULT("%s_close_again_error=%d", prefix, (int)cudaIpcCloseMemHandle(p));
    return 0;
}

/* Re-executes this program in child mode and returns its exit status. */
static int run_child(const char *self, const char *mode, const char *hex) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) FAIL("fork failed");
    if (pid == 0) {
        execl("/proc/self/exe", self, mode, hex, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) FAIL("waitpid failed");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--child") == 0) return child(argv[2], "child");
    if (argc == 3 && strcmp(argv[1], "--stale") == 0) return child(argv[2], "stale");

    RT(cudaSetDevice(0));
    void *buf = NULL;
    RT(cudaMalloc(&buf, 8 * MIB));
    cudaIpcMemHandle_t h;
    RT(cudaIpcGetMemHandle(&h, buf));
    char hex[2 * CUDA_IPC_HANDLE_SIZE + 1];
    to_hex(&h, hex);
    RESULT("parent_ptr=0x%lx handle_hex=%s", (unsigned long)(uintptr_t)buf, hex);

    /* Opening a handle in the process that exported it is refused. */
    void *self_open = NULL;
    RESULT("self_open_error=%d", (int)cudaIpcOpenMemHandle(&self_open, h, cudaIpcMemLazyEnablePeerAccess));
    cudaIpcMemHandle_t garbage;
    memset(&garbage, 0xab, sizeof garbage);
    RESULT("garbage_open_error=%d", (int)cudaIpcOpenMemHandle(&self_open, garbage, cudaIpcMemLazyEnablePeerAccess));
    RESULT("bad_flags_error=%d", (int)cudaIpcOpenMemHandle(&self_open, h, 0x10));
    (void)cudaGetLastError();

    RESULT("child_status=%d", run_child(argv[0], "--child", hex));
    RT(cudaFree(buf));
    RESULT("stale_status=%d", run_child(argv[0], "--stale", hex));
    return 0;
}
