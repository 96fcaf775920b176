"""vllm/device_allocator/cumem.py (simulated): CuMemAllocator, the sleep-mode allocator. Inside
use_memory_pool(tag), allocations go to a MemPool whose segments come from cumem_allocator's
my_malloc (cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess)."""
import contextlib

import torch
from simcomm import find_loaded_library


class CuMemAllocator:
    instance = None

    @staticmethod
    def get_instance():
        if CuMemAllocator.instance is None:
            CuMemAllocator.instance = CuMemAllocator()
        return CuMemAllocator.instance

    def __init__(self):
        import ctypes
        ctypes.CDLL("cumem_allocator.abi3.so")
        lib_name = find_loaded_library("cumem_allocator")
        self.allocator = torch.cuda.memory.CUDAPluggableAllocator(lib_name, "my_malloc", "my_free")
        self.pools = {}

    @contextlib.contextmanager
    def use_memory_pool(self, tag="default"):
        pool = self.pools.setdefault(tag, torch.cuda.memory.MemPool(self.allocator))
        with torch.cuda.memory.use_mem_pool(pool):
            yield
