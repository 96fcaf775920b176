"""The simulated torch's native side: the CUDA runtime (libcudart.so.12, linked dynamically as
in PyTorch wheels) and the caching allocator (libc10_cuda.so), through ctypes. ctypes releases
the GIL around each call, as PyTorch's bindings do around the allocator."""
import ctypes
import threading

from simtruth import Event, truth

_VP = ctypes.c_void_p
_SZ = ctypes.c_size_t
_U64 = ctypes.c_uint64
_P = ctypes.POINTER
HOST_CHUNK = 4 << 20
H2D, D2D = 1, 3
MIB = 1 << 20


class OutOfMemoryError(RuntimeError):
    pass


OutOfMemoryError.__module__ = "torch"  # as PyTorch shows it: torch.OutOfMemoryError


_CUDART = {
    "cudaSetDevice": [ctypes.c_int], "cudaGetDevice": [_P(ctypes.c_int)], "cudaGetDeviceCount": [_P(ctypes.c_int)],
    "cudaMemGetInfo": [_P(_SZ), _P(_SZ)], "cudaMemcpy": [_VP, _VP, _SZ, ctypes.c_int],
    "cudaMemset": [_VP, ctypes.c_int, _SZ], "cudaStreamCreate": [_P(_VP)], "cudaStreamSynchronize": [_VP],
    "cudaStreamBeginCapture": [_VP, ctypes.c_int], "cudaStreamEndCapture": [_VP, _P(_VP)],
    "cudaGraphInstantiate": [_P(_VP), _VP, ctypes.c_ulonglong], "cudaGraphLaunch": [_VP, _VP],
    "cudaGraphExecDestroy": [_VP], "cudaGraphDestroy": [_VP], "cudaDeviceSynchronize": [],
}
_C10 = {
    "c10sim_malloc": ([_U64, _VP, ctypes.c_int, _P(_U64)], ctypes.c_int),
    "c10sim_free": ([_U64], ctypes.c_int),
    "c10sim_empty_cache": ([], ctypes.c_int),
    "c10sim_create_pool": ([_VP, _VP], ctypes.c_int),
    "c10sim_allocate_to_pool": ([ctypes.c_int], None),
    "c10sim_release_pool": ([ctypes.c_int], ctypes.c_int),
    "c10sim_segment_of": ([_U64, _P(_U64), _P(_U64)], ctypes.c_int),
    "c10sim_stats": ([ctypes.c_int, _P(_U64 * 4)], None),
    "c10sim_reset_peak": ([ctypes.c_int], None),
    "c10sim_drain": ([_P(Event), ctypes.c_int], ctypes.c_int),
}


class _Runtime:
    def __init__(self):
        self.cudart = ctypes.CDLL("libcudart.so.12", mode=ctypes.RTLD_GLOBAL)
        self.c10 = ctypes.CDLL("libc10_cuda.so", mode=ctypes.RTLD_GLOBAL)
        self.cudart.cudaGetErrorString.restype = ctypes.c_char_p
        self.cudart.cudaGetErrorString.argtypes = [ctypes.c_int]
        for name, argtypes in _CUDART.items():
            fn = getattr(self.cudart, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes
        for name, (argtypes, restype) in _C10.items():
            fn = getattr(self.c10, name)
            fn.restype, fn.argtypes = restype, argtypes
        self.host = ctypes.create_string_buffer(HOST_CHUNK)
        truth.add_source("c10", self.c10.c10sim_drain)

    def call(self, name, *args):
        rc = getattr(self.cudart, name)(*args)
        if rc != 0:
            raise RuntimeError(f"CUDA error: {self.cudart.cudaGetErrorString(rc).decode()} ({name}, {rc})")


_rt = None
_lock = threading.Lock()
_local = threading.local()


def rt():
    global _rt
    if _rt is None:
        with _lock:
            if _rt is None:
                _rt = _Runtime()
    return _rt


def current_stream():
    return getattr(_local, "stream", None)


def set_current_stream(handle):
    _local.stream = handle


def get_device():
    d = ctypes.c_int()
    rt().call("cudaGetDevice", ctypes.byref(d))
    return d.value


def mem_get_info():
    free, total = _SZ(), _SZ()
    rt().call("cudaMemGetInfo", ctypes.byref(free), ctypes.byref(total))
    truth.probe(get_device(), free.value, total.value)
    return free.value, total.value


def malloc(nbytes):
    r = rt()
    out = _U64()
    rc = r.c10.c10sim_malloc(nbytes, current_stream(), truth.tag(), ctypes.byref(out))
    truth.drain()
    if rc == 2:
        dev = get_device()
        free, total = mem_get_info()  # PyTorch's OOM message asks the driver too
        raise OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {nbytes / (1 << 30):.2f} GiB. GPU {dev} has a total capacity "
            f"of {total / (1 << 30):.2f} GiB of which {free / (1 << 30):.2f} GiB is free.")
    if rc != 0:
        raise RuntimeError(f"CUDA error {rc} in the caching allocator")
    return out.value


def free(ptr):
    rt().c10.c10sim_free(ptr)


def memcpy_h2d(dst, nbytes):
    """Copy `nbytes` from host memory (no data exists: chunks of one small buffer)."""
    r = rt()
    src = ctypes.cast(r.host, _VP)
    for off in range(0, nbytes, HOST_CHUNK):
        r.call("cudaMemcpy", _VP(dst + off), src, min(HOST_CHUNK, nbytes - off), H2D)
    truth.h2d(dst, nbytes)


def memcpy_d2d(dst, src, nbytes):
    if nbytes:
        rt().call("cudaMemcpy", _VP(dst), _VP(src), nbytes, D2D)


def memset(dst, value, nbytes):
    if nbytes:
        rt().call("cudaMemset", _VP(dst), value, nbytes)


def stats(dev):
    out = (_U64 * 4)()
    rt().c10.c10sim_stats(dev, ctypes.byref(out))
    return {"allocated": out[0], "allocated_peak": out[1], "reserved": out[2], "reserved_peak": out[3]}
