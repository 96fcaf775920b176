"""Interposer scenario: the CUDA runtime reached through ctypes, the way SGLang's and
vLLM's CudaRTLibrary reach it (ctypes.CDLL(path) -> dlsym on that handle).

Modes (argv[1]):
  basic     allocate 3 buffers, query free memory, export an IPC handle, free one
  os_exit   like basic, then leave with os._exit(0) (no atexit handlers run)
  ipc       parent exports an 8 MiB buffer; a spawned child opens it (custom allreduce)
Prints RESULT lines; Python stdlib only.
"""
import ctypes
import multiprocessing as mp
import os
import sys

MiB = 1 << 20


class cudaIpcMemHandle_t(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 64)]


def find_loaded_cudart():
    """The path of the libcudart this process already loaded (as SGLang does)."""
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart" in line:
                return line.split()[-1]
    return None


def load():
    ctypes.CDLL("libcudart.so.12")  # stands in for torch having loaded it
    path = find_loaded_cudart()
    assert path, "libcudart is not mapped"
    lib = ctypes.CDLL(path)
    lib.cudaSetDevice.argtypes = [ctypes.c_int]
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    lib.cudaMemGetInfo.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    lib.cudaIpcGetMemHandle.argtypes = [ctypes.POINTER(cudaIpcMemHandle_t), ctypes.c_void_p]
    lib.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), cudaIpcMemHandle_t, ctypes.c_uint]
    lib.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
    for name in ("cudaSetDevice", "cudaMalloc", "cudaFree", "cudaMemGetInfo", "cudaIpcGetMemHandle",
                 "cudaIpcOpenMemHandle", "cudaIpcCloseMemHandle"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed with {rc}")


def malloc(lib, n):
    p = ctypes.c_void_p()
    check(lib.cudaMalloc(ctypes.byref(p), n), "cudaMalloc")
    return p


def basic(lib):
    check(lib.cudaSetDevice(0), "cudaSetDevice")
    a, b, c = malloc(lib, 8 * MiB), malloc(lib, 8 * MiB), malloc(lib, 16 * MiB)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(lib.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)), "cudaMemGetInfo")
    h = cudaIpcMemHandle_t()
    check(lib.cudaIpcGetMemHandle(ctypes.byref(h), a), "cudaIpcGetMemHandle")
    check(lib.cudaFree(c), "cudaFree")
    print(f"RESULT live={16 * MiB} ipc={8 * MiB} other={8 * MiB} probe_free={free.value}", flush=True)


def child(handle_bytes, q):
    lib = load()
    check(lib.cudaSetDevice(1), "cudaSetDevice")
    h = cudaIpcMemHandle_t()
    ctypes.memmove(ctypes.byref(h), handle_bytes, 64)
    p = ctypes.c_void_p()
    check(lib.cudaIpcOpenMemHandle(ctypes.byref(p), h, 1), "cudaIpcOpenMemHandle")  # LazyEnablePeerAccess
    q.put(os.getpid())
    check(lib.cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle")


def ipc(lib):
    check(lib.cudaSetDevice(0), "cudaSetDevice")
    a = malloc(lib, 8 * MiB)
    h = cudaIpcMemHandle_t()
    check(lib.cudaIpcGetMemHandle(ctypes.byref(h), a), "cudaIpcGetMemHandle")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=child, args=(bytes(h), q))
    proc.start()
    child_pid = q.get(timeout=60)
    proc.join(60)
    print(f"RESULT parent_pid={os.getpid()} child_pid={child_pid} child_exit={proc.exitcode} ipc={8 * MiB}",
          flush=True)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "basic"
    lib = load()
    if mode == "basic":
        basic(lib)
    elif mode == "os_exit":
        basic(lib)
        os._exit(0)
    elif mode == "ipc":
        ipc(lib)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
