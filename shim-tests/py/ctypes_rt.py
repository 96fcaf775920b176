#!/usr/bin/env python3
"""The runtime through ctypes, the way SGLang's / vLLM's ``CudaRTLibrary`` (custom all-reduce) does it.

libcudart is loaded once by name (as torch would have loaded it), then the loaded file is found in
``/proc/self/maps`` and opened again with ``ctypes.CDLL(path)``; every function gets its argtypes and
restype; ``cudaIpcMemHandle_t`` is a 64-byte Structure passed by value. The parent allocates 8 MiB
buffers, reads ``cudaMemGetInfo``, exports an IPC handle and has it opened by two other processes:
a ``--child HEX`` re-execution and a ``multiprocessing`` spawn child, both with
``cudaIpcMemLazyEnablePeerAccess`` on another device when there is one.

Output: ``RESULT key=value`` lines. Keys: lib_path alloc_delta handle_hex copy_ok bad_free_error
child_open_error child_device child_close_error mp_open_error mp_device mp_close_error freed_delta.
Python standard library only. Exit status 0 on success.
"""
import ctypes
import multiprocessing
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, List, Optional

MIB = 1 << 20
cudaError_t = ctypes.c_int
cudaMemcpyKind = ctypes.c_int
cudaMemcpyHostToDevice = 1
cudaMemcpyDeviceToHost = 2
cudaIpcMemLazyEnablePeerAccess = 1


class cudaIpcMemHandle_t(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 64)]


@dataclass
class Function:
    name: str
    restype: Any
    argtypes: List[Any]


def find_loaded_library(lib_name: str) -> Optional[str]:
    """Path of the first mapped file whose name starts with ``lib_name`` (from /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        for line in f:
            if lib_name not in line:
                continue
            path = line.split()[-1]
            if os.path.basename(path).startswith(lib_name):
                return path
    return None


class CudaRTLibrary:
    exported_functions = [
        Function("cudaSetDevice", cudaError_t, [ctypes.c_int]),
        Function("cudaGetDeviceCount", cudaError_t, [ctypes.POINTER(ctypes.c_int)]),
        Function("cudaDeviceSynchronize", cudaError_t, []),
        Function("cudaDeviceReset", cudaError_t, []),
        Function("cudaGetErrorString", ctypes.c_char_p, [cudaError_t]),
        Function("cudaMalloc", cudaError_t, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]),
        Function("cudaFree", cudaError_t, [ctypes.c_void_p]),
        Function("cudaMemset", cudaError_t, [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]),
        Function("cudaMemcpy", cudaError_t,
                 [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, cudaMemcpyKind]),
        Function("cudaMemGetInfo", cudaError_t,
                 [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
        Function("cudaIpcGetMemHandle", cudaError_t,
                 [ctypes.POINTER(cudaIpcMemHandle_t), ctypes.c_void_p]),
        Function("cudaIpcOpenMemHandle", cudaError_t,
                 [ctypes.POINTER(ctypes.c_void_p), cudaIpcMemHandle_t, ctypes.c_uint]),
        Function("cudaIpcCloseMemHandle", cudaError_t, [ctypes.c_void_p]),
    ]

    def __init__(self, so_file: Optional[str] = None):
        if so_file is None:
            so_file = find_loaded_library("libcudart")
            assert so_file is not None, "libcudart is not loaded in the current process"
        self.path = so_file
        self.lib = ctypes.CDLL(so_file)
        self.funcs = {}
        for func in self.exported_functions:
            f = getattr(self.lib, func.name)
            f.restype = func.restype
            f.argtypes = func.argtypes
            self.funcs[func.name] = f

    def check(self, result: int) -> None:
        if result != 0:
            error_str = self.funcs["cudaGetErrorString"](result).decode()
            raise RuntimeError(f"CUDART error {result}: {error_str}")

    def cudaSetDevice(self, device: int) -> None:
        self.check(self.funcs["cudaSetDevice"](device))

    def cudaGetDeviceCount(self) -> int:
        n = ctypes.c_int()
        self.check(self.funcs["cudaGetDeviceCount"](ctypes.byref(n)))
        return n.value

    def cudaDeviceSynchronize(self) -> None:
        self.check(self.funcs["cudaDeviceSynchronize"]())

    def cudaMalloc(self, size: int) -> ctypes.c_void_p:
        p = ctypes.c_void_p()
        self.check(self.funcs["cudaMalloc"](ctypes.byref(p), size))
        return p

    def cudaFree(self, p: ctypes.c_void_p) -> None:
        self.check(self.funcs["cudaFree"](p))

    def cudaMemset(self, p: ctypes.c_void_p, value: int, count: int) -> None:
        self.check(self.funcs["cudaMemset"](p, value, count))

    def cudaMemcpy(self, dst: ctypes.c_void_p, src: ctypes.c_void_p, count: int, kind: int) -> None:
        self.check(self.funcs["cudaMemcpy"](dst, src, count, kind))

    def cudaMemGetInfo(self) -> tuple:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.check(self.funcs["cudaMemGetInfo"](ctypes.byref(free), ctypes.byref(total)))
        return free.value, total.value

    def cudaIpcGetMemHandle(self, p: ctypes.c_void_p) -> cudaIpcMemHandle_t:
        handle = cudaIpcMemHandle_t()
        self.check(self.funcs["cudaIpcGetMemHandle"](ctypes.byref(handle), p))
        return handle

    def cudaIpcOpenMemHandle_raw(self, handle: cudaIpcMemHandle_t) -> tuple:
        """(error code, pointer) without raising: the callers report the code."""
        p = ctypes.c_void_p()
        err = self.funcs["cudaIpcOpenMemHandle"](ctypes.byref(p), handle, cudaIpcMemLazyEnablePeerAccess)
        return err, p

    def cudaIpcCloseMemHandle_raw(self, p: ctypes.c_void_p) -> int:
        return self.funcs["cudaIpcCloseMemHandle"](p)


def load_runtime() -> CudaRTLibrary:
    """Load libcudart the way torch + vLLM end up with it: by name first, then by mapped path."""
    ctypes.CDLL("libcudart.so.12")
    return CudaRTLibrary()


def result(**pairs: Any) -> None:
    print("RESULT " + " ".join(f"{k}={v}" for k, v in pairs.items()), flush=True)


def open_remote(handle_bytes: bytes) -> dict:
    """Opens an exported handle in this (non-exporting) process on another device, if any."""
    rt = load_runtime()
    dev = 1 if rt.cudaGetDeviceCount() > 1 else 0
    rt.cudaSetDevice(dev)
    handle = cudaIpcMemHandle_t.from_buffer_copy(handle_bytes)
    err, p = rt.cudaIpcOpenMemHandle_raw(handle)
    out = {"open_error": err, "device": dev, "close_error": -1}
    if err == 0:
        buf = ctypes.create_string_buffer(256)
        rt.cudaMemcpy(ctypes.cast(buf, ctypes.c_void_p), p, 256, cudaMemcpyDeviceToHost)
        out["close_error"] = rt.cudaIpcCloseMemHandle_raw(p)
    return out


def mp_child(handle_bytes: bytes, queue: Any) -> None:
    """multiprocessing target (spawn start method), as in custom all-reduce's handle exchange."""
    try:
        queue.put(open_remote(handle_bytes))
    except Exception as e:  # report instead of dying silently
        queue.put({"error": repr(e)})


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        r = open_remote(bytes.fromhex(sys.argv[2]))
        result(**{f"child_{k}": v for k, v in r.items()})
        return 0

    rt = load_runtime()
    result(lib_path=rt.path)
    rt.cudaSetDevice(0)
    free0, _ = rt.cudaMemGetInfo()
    bufs = [rt.cudaMalloc(8 * MIB) for _ in range(2)]
    free1, _ = rt.cudaMemGetInfo()
    result(alloc_delta=free0 - free1)

    host = ctypes.create_string_buffer(b"\x5a" * 4096, 4096)
    rt.cudaMemset(bufs[0], 0, 8 * MIB)
    rt.cudaMemcpy(bufs[0], ctypes.cast(host, ctypes.c_void_p), 4096, cudaMemcpyHostToDevice)
    rt.cudaMemcpy(ctypes.cast(host, ctypes.c_void_p), bufs[1], 4096, cudaMemcpyDeviceToHost)
    rt.cudaDeviceSynchronize()
    result(copy_ok=1)

    handle = rt.cudaIpcGetMemHandle(bufs[0])
    hexed = bytes(handle).hex()
    result(handle_hex=hexed)

    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", hexed],
                           capture_output=True, text=True, timeout=120)
    sys.stdout.write(child.stdout)
    sys.stderr.write(child.stderr)
    result(child_status=child.returncode)

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=mp_child, args=(bytes(handle), queue))
    proc.start()
    r = queue.get(timeout=120)
    proc.join(timeout=120)
    if "error" in r:
        print(f"ctypes_rt: spawn child failed: {r['error']}", file=sys.stderr)
        return 1
    result(**{f"mp_{k}": v for k, v in r.items()}, mp_status=proc.exitcode)

    result(bad_free_error=rt.funcs["cudaFree"](ctypes.c_void_p(0x1234)))
    for b in bufs:
        rt.cudaFree(b)
    free2, _ = rt.cudaMemGetInfo()
    result(freed_delta=free0 - free2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
