/* A program that looks like a Python runtime to culedger but is not a readable one: it exports
 * PyGILState_GetThisThreadState, Py_Version, _PyRuntime and the type objects (link with
 * -rdynamic), and fills them according to argv[1]:
 *   badcookie   _PyRuntime.debug_offsets does not start with "xdebugpy"
 *   badversion  the cookie is right, the debug offsets' version is not Py_Version's
 *   unknown     Py_Version says 3.19
 *   old         Py_Version says 3.9
 *   garbage     cookie and version right (3.13), offsets absurd but small: the thread state's
 *               current frame points at unmapped memory
 * then allocates 8 MiB twice through the runtime and prints RESULT ok=1. tests/call_sites.rs
 * expects no Python frames, one warning, and a working process. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int cudaMalloc(void **p, size_t n);

uint32_t Py_Version = 0x030D05F0;
unsigned char _PyRuntime[8192] __attribute__((aligned(64)));
uint64_t PyCode_Type[32], PyUnicode_Type[32], PyBytes_Type[32];
static uint64_t tstate[512];

void *PyGILState_GetThisThreadState(void) { return tstate; }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "badcookie";
    memcpy(_PyRuntime, "xdebugpy", 8);
    uint64_t v = 0x030D05F0;
    memcpy(_PyRuntime + 8, &v, 8);
    /* Every offset past the header reads 8: small, so it passes the sanity check. */
    for (size_t i = 24; i + 8 <= 1024; i += 8) memcpy(_PyRuntime + i, &(uint64_t){8}, 8);
    for (size_t i = 0; i < 512; i++) tstate[i] = 0xdead00000000ull;
    if (!strcmp(mode, "badcookie")) memcpy(_PyRuntime, "notpython", 8);
    else if (!strcmp(mode, "badversion")) memcpy(_PyRuntime + 8, &(uint64_t){0x030C00F0}, 8);
    else if (!strcmp(mode, "unknown")) Py_Version = 0x031300F0;
    else if (!strcmp(mode, "old")) Py_Version = 0x030912F0;
    else if (strcmp(mode, "garbage")) return 2;
    void *p = NULL, *q = NULL;
    int rc = cudaMalloc(&p, 8u << 20);
    int rc2 = cudaMalloc(&q, 8u << 20);
    printf("RESULT rc=%d rc2=%d ok=%d\n", rc, rc2, rc == 0 && rc2 == 0);
    return rc == 0 && rc2 == 0 ? 0 : 1;
}
