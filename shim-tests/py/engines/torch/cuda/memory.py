"""torch/cuda/memory.py of the simulated torch: the caching allocator's controls."""
import contextlib
import ctypes

from simtruth import truth

from .. import _cuda_runtime as _crt


def empty_cache():
    """Give every fully free cached segment back to CUDA (cudaFree)."""
    _crt.rt().c10.c10sim_empty_cache()
    truth.drain()


def mem_get_info(device=None):
    return _crt.mem_get_info()


def memory_stats(device=None):
    s = _crt.stats(_crt.get_device())
    return {"allocated_bytes.all.current": s["allocated"], "allocated_bytes.all.peak": s["allocated_peak"],
            "reserved_bytes.all.current": s["reserved"], "reserved_bytes.all.peak": s["reserved_peak"]}


def memory_allocated(device=None):
    return _crt.stats(_crt.get_device())["allocated"]


def max_memory_allocated(device=None):
    return _crt.stats(_crt.get_device())["allocated_peak"]


def memory_reserved(device=None):
    return _crt.stats(_crt.get_device())["reserved"]


def reset_peak_memory_stats(device=None):
    _crt.rt().c10.c10sim_reset_peak(_crt.get_device())


class CUDAPluggableAllocator:
    """Segments from a shared library's `malloc_fn(size, device, stream)` / `free_fn(...)`."""

    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        self._lib = ctypes.CDLL(path_to_so_file)
        self._alloc = ctypes.cast(getattr(self._lib, alloc_fn_name), ctypes.c_void_p)
        self._free = ctypes.cast(getattr(self._lib, free_fn_name), ctypes.c_void_p)


class MemPool:
    """A private pool of the caching allocator, optionally with a pluggable allocator."""

    def __init__(self, allocator=None):
        m = allocator._alloc if allocator is not None else None
        f = allocator._free if allocator is not None else None
        self.id = _crt.rt().c10.c10sim_create_pool(m, f)
        self.allocator = allocator


@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    """Route this device's allocations to `pool` inside the block."""
    c10 = _crt.rt().c10
    c10.c10sim_allocate_to_pool(pool.id)
    try:
        yield
    finally:
        c10.c10sim_allocate_to_pool(0)
