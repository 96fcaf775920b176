"""Helper of scripts/bench.sh: the cost of one captured call site, from Python.

Recurses to a depth of DEPTH Python frames (through map() every fourth one, so that native
frames nest too), then makes N cudaMalloc(2 MiB) + cudaFree calls
through ctypes (the GIL released around each, as PyTorch's bindings do). Run it under culedger
with CULEDGER_SITE_MIN=0 (every allocation captures a site) and with a minimum above 2 MiB
(none does): the difference per call is what a site costs, in CPU time of the calling
thread. Prints `RESULT ns_per_call=...`."""
import ctypes
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
DEPTH = int(sys.argv[2]) if len(sys.argv) > 2 else 64
rt = ctypes.CDLL("libcudart.so.12")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]


def loop():
    p = ctypes.c_void_p()
    malloc, free, ref = rt.cudaMalloc, rt.cudaFree, ctypes.byref(p)
    # CPU time of this thread: captures run on it, and a loaded machine's scheduling
    # (other processes, 2 cores) does not count.
    t0 = time.thread_time_ns()
    for _ in range(N):
        malloc(ref, 2 << 20)
        free(p)
    return (time.thread_time_ns() - t0) / N


def deep(n):
    # Through map() (C) every few levels: native frames nest as they do under C extensions.
    if n <= 0:
        return loop()
    return next(map(deep, [n - 1])) if n % 4 == 0 else deep(n - 1)


loop()  # warm up: the runtime's first call initialises it
# `deep` adds DEPTH frames on top of this module's and loop's.
print("RESULT ns_per_call=%.1f" % deep(max(DEPTH - 2, 0)), flush=True)
