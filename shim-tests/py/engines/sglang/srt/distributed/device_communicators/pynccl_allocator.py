"""sglang/srt/distributed/device_communicators/pynccl_allocator.py (simulated): the NCCL
symmetric-memory pool of SGLang 0.5.23.

``prealloc_symmetric_memory_pool`` (called by model_runner_components/cuda_graph_setup.py
``finalize_cuda_graph_capture``, after the KV pool and the CUDA graph capture) allocates
``SGLANG_SYMM_MEM_PREALLOC_GB_SIZE`` GiB (default -1: nothing) under ``use_symmetric_memory``
when ``--enable-symm-mem`` is on and the worker is not a draft worker: SGLang's torch.empty goes
through a CUDAPluggableAllocator whose ``nccl_alloc_plug`` calls ``ncclMemAlloc``, so the memory
is allocated inside libnccl (cuMemCreate and its mapping), and the segment is registered as a
window (``ncclCommWindowRegister``) on the TP group's communicator. The simulation calls
ncclMemAlloc through ctypes where SGLang's compiled plug-in does (NVIDIA/srt-slurm issue 172:
4 GiB after the pool at --mem-fraction-static 0.95)."""
import contextlib
import ctypes
import os

from simtruth import truth


def symm_mem_prealloc_gb_size():
    """envs.SGLANG_SYMM_MEM_PREALLOC_GB_SIZE (sglang/srt/environ.py: EnvInt(-1))."""
    try:
        return int(os.environ.get("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", "-1"))
    except ValueError:
        return -1


class SymmetricMemoryContext:
    def __init__(self, group):
        self.group = group
        self.segments = []

    def nccl_alloc_plug(self, size):
        nccl = self.group.pynccl_comm.nccl
        ptr = ctypes.c_void_p()
        with truth.category("comm"):
            rc = nccl.lib.ncclMemAlloc(ctypes.byref(ptr), ctypes.c_size_t(size))
            truth.drain()
        if rc != 0:
            # sglang's NCCLCHECK in nccl_alloc_plug prints this and returns NULL; torch raises.
            raise RuntimeError("ERROR: NCCL symmetric memory allocation failed. Most likely out of device "
                               f"memory. 'unhandled cuda error' (ncclMemAlloc of {size} bytes)")
        self.segments.append((ptr.value, size))
        return ptr.value

    def register_segments(self):
        comm = self.group.pynccl_comm
        for ptr, size in self.segments:
            win = ctypes.c_void_p()
            nccl = comm.nccl.lib
            nccl.ncclCommWindowRegister.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                    ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
            nccl.ncclCommWindowRegister(comm.comm, ctypes.c_void_p(ptr), ctypes.c_size_t(size), ctypes.byref(win), 1)


@contextlib.contextmanager
def use_symmetric_memory(group):
    ctx = SymmetricMemoryContext(group)
    yield ctx
    ctx.register_segments()


def prealloc_symmetric_memory_pool(*, is_draft_worker, enable_symm_mem, device):
    # PyTorch mempools never de-fragment memory in OOM scenarios, so SGLang pre-allocates a
    # large chunk of memory to limit fragmentation.
    gb = symm_mem_prealloc_gb_size()
    if is_draft_worker or not enable_symm_mem or gb <= 0:
        return None
    from sglang.srt.distributed.parallel_state import get_tp_group

    with use_symmetric_memory(get_tp_group()) as ctx:
        return ctx.nccl_alloc_plug(gb * 1024 * 1024 * 1024)
