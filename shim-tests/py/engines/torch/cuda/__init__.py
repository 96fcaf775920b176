"""torch.cuda of the simulated torch."""
import contextlib
import ctypes

from .. import _cuda_runtime as _crt
from .._cuda_runtime import OutOfMemoryError  # noqa: F401
from .graphs import CUDAGraph, graph, graph_pool_handle  # noqa: F401
from .memory import (CUDAPluggableAllocator, MemPool, empty_cache, max_memory_allocated, mem_get_info,  # noqa: F401
                     memory_allocated, memory_reserved, memory_stats, reset_peak_memory_stats, use_mem_pool)


def is_available():
    return device_count() > 0


def device_count():
    n = ctypes.c_int()
    try:
        _crt.rt().call("cudaGetDeviceCount", ctypes.byref(n))
    except RuntimeError:
        return 0
    return n.value


def set_device(d):
    _crt.rt().call("cudaSetDevice", d if isinstance(d, int) else (d.index or 0))


def current_device():
    return _crt.get_device()


def synchronize(device=None):
    _crt.rt().call("cudaDeviceSynchronize")


def get_device_capability(device=None):
    return (9, 0)


class Stream:
    def __init__(self, device=None, priority=0):
        h = ctypes.c_void_p()
        _crt.rt().call("cudaStreamCreate", ctypes.byref(h))
        self.cuda_stream = h.value

    def synchronize(self):
        _crt.rt().call("cudaStreamSynchronize", ctypes.c_void_p(self.cuda_stream))

    def wait_stream(self, other):
        pass


def current_stream(device=None):
    s = Stream.__new__(Stream)
    s.cuda_stream = _crt.current_stream()
    return s


@contextlib.contextmanager
def stream(s):
    before = _crt.current_stream()
    _crt.set_current_stream(None if s is None else s.cuda_stream)
    try:
        yield
    finally:
        _crt.set_current_stream(before)


class device:
    """`torch.cuda.device(d)`: the current device inside the block."""

    def __init__(self, d):
        self.index = d if isinstance(d, int) else (d.index or 0)

    def __enter__(self):
        self.prev = current_device()
        set_device(self.index)

    def __exit__(self, *exc):
        set_device(self.prev)
        return False
