"""Communicators shared by the simulated SGLang and vLLM (SGLang's are adapted from vLLM's);
sim-only module: each engine's ``device_communicators`` files subclass these, so the frames of
the engine's own classes are on the stack when memory is allocated.

- ``CudaRTLibraryBase``: the runtime through ctypes, found in /proc/self/maps (``CudaRTLibrary``).
- ``NCCLLibraryBase`` / ``PyNcclCommunicatorBase``: libnccl.so.2 through ctypes; the
  communicator's buffers are allocated inside libnccl (through its own driver table).
- ``CustomAllreduceBase``: meta and buffer from ``cudaMalloc`` exported with
  ``cudaIpcGetMemHandle`` and opened by every peer (``cudaIpcMemLazyEnablePeerAccess``), 8 MiB of
  ``rank_data`` from the caching allocator, and after graph capture the graph pool's segments
  that fed it exported and opened by the peers (``register_graph_buffers``). With
  ``lazy_open``, the peers' buffers are opened, and peer access enabled, at the first
  all-reduce it serves rather than in the constructor.
"""
import contextlib
import ctypes
import os

import torch
import torch.distributed as dist
from simtruth import Event, truth
from torch import _cuda_runtime as _crt

cudaIpcMemLazyEnablePeerAccess = 1


class cudaIpcMemHandle_t(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 64)]


class ncclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def find_loaded_library(prefix):
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith(prefix):
                return path
    return None


_VP = ctypes.c_void_p


class CudaRTLibraryBase:
    _FUNCS = {
        "cudaSetDevice": [ctypes.c_int], "cudaMalloc": [ctypes.POINTER(_VP), ctypes.c_size_t], "cudaFree": [_VP],
        "cudaIpcGetMemHandle": [ctypes.POINTER(cudaIpcMemHandle_t), _VP],
        "cudaIpcOpenMemHandle": [ctypes.POINTER(_VP), cudaIpcMemHandle_t, ctypes.c_uint],
        "cudaDeviceEnablePeerAccess": [ctypes.c_int, ctypes.c_uint], "cudaGetDevice": [ctypes.POINTER(ctypes.c_int)],
    }

    def __init__(self):
        path = find_loaded_library("libcudart")
        assert path, "libcudart is not loaded in this process"
        self.lib = ctypes.CDLL(path)
        for name, argtypes in self._FUNCS.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes

    def _check(self, name, rc):
        if rc != 0:
            raise RuntimeError(f"CUDART error {rc} in {name}")

    def device(self):
        d = ctypes.c_int()
        self._check("cudaGetDevice", self.lib.cudaGetDevice(ctypes.byref(d)))
        return d.value

    def cudaMalloc(self, size):
        p = _VP()
        self._check("cudaMalloc", self.lib.cudaMalloc(ctypes.byref(p), size))
        truth.direct_alloc(self.device(), p.value, size)
        return p

    def cudaFree(self, p):
        self._check("cudaFree", self.lib.cudaFree(p))
        truth.direct_free(p.value)

    def cudaIpcGetMemHandle(self, p):
        h = cudaIpcMemHandle_t()
        self._check("cudaIpcGetMemHandle", self.lib.cudaIpcGetMemHandle(ctypes.byref(h), p))
        truth.export(p.value)
        return h

    def cudaIpcOpenMemHandle(self, h):
        p = _VP()
        self._check("cudaIpcOpenMemHandle",
                    self.lib.cudaIpcOpenMemHandle(ctypes.byref(p), h, cudaIpcMemLazyEnablePeerAccess))
        return p

    def cudaDeviceEnablePeerAccess(self, peer):
        rc = self.lib.cudaDeviceEnablePeerAccess(peer, 0)
        if rc not in (0, 704):  # 704: already enabled
            self._check("cudaDeviceEnablePeerAccess", rc)


class NCCLLibraryBase:
    _drained = False

    def __init__(self, so_file="libnccl.so.2"):
        self.lib = ctypes.CDLL(so_file)
        self.lib.ncclCommInitRank.argtypes = [ctypes.POINTER(_VP), ctypes.c_int, ncclUniqueId, ctypes.c_int]
        self.lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(ncclUniqueId)]
        self.lib.ncclAllReduce.argtypes = [_VP, _VP, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _VP, _VP]
        self.lib.ncclSimDrain.argtypes = [ctypes.POINTER(Event), ctypes.c_int]
        if not NCCLLibraryBase._drained:
            truth.add_source("nccl", self.lib.ncclSimDrain)
            NCCLLibraryBase._drained = True

    def NCCL_CHECK(self, rc):
        if rc != 0:
            raise RuntimeError(f"NCCL error {rc}")

    def ncclGetUniqueId(self):
        uid = ncclUniqueId()
        self.NCCL_CHECK(self.lib.ncclGetUniqueId(ctypes.byref(uid)))
        return uid

    def ncclCommInitRank(self, world_size, unique_id, rank):
        comm = _VP()
        self.NCCL_CHECK(self.lib.ncclCommInitRank(ctypes.byref(comm), world_size, unique_id, rank))
        truth.drain()
        return comm

    def ncclAllReduce(self, send, recv, count, comm, stream):
        self.NCCL_CHECK(self.lib.ncclAllReduce(_VP(send), _VP(recv), count, 7, 0, comm, _VP(stream)))


class PyNcclCommunicatorBase:
    def init_comm(self, library_cls, device):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.nccl = library_cls()
        ids = [bytes(self.nccl.ncclGetUniqueId()) if self.rank == 0 else None]
        dist.broadcast_object_list(ids, src=0)
        self.unique_id = ncclUniqueId.from_buffer_copy(ids[0])
        self.device = device
        with torch.cuda.device(device):
            self.comm = self.nccl.ncclCommInitRank(self.world_size, self.unique_id, self.rank)
            self.stream = torch.cuda.Stream()
            # A small all_reduce for warmup.
            data = torch.zeros(1, device=device)
            self.all_reduce(data)
            self.stream.synchronize()
            del data

    def all_reduce(self, tensor):
        self.nccl.ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), self.comm, self.stream.cuda_stream)
        return tensor


class CustomAllreduceBase:
    META_SIZE = 4096

    def init_ca(self, device, max_size, lazy_open):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device, self.max_size, self.lazy_open = device, max_size, lazy_open
        self._pending = []  # peers' handles still to open
        self._graph_inputs = []
        self._IS_CAPTURING = False
        self.lib = CudaRTLibraryBase()

    def share(self, size_in_bytes):
        """cudaMalloc + cudaIpcGetMemHandle, handles exchanged, the peers' opened (now or lazily)."""
        pointer = self.lib.cudaMalloc(size_in_bytes)
        handle = self.lib.cudaIpcGetMemHandle(pointer)
        handles = [None] * self.world_size
        dist.all_gather_object(handles, bytes(handle))
        pointers = [None] * self.world_size
        pointers[self.rank] = pointer.value
        for i, h in enumerate(handles):
            if i != self.rank:
                self._pending.append((i, h, pointers))
        if not self.lazy_open:
            self.open_peers()
        return pointers

    def open_peers(self):
        peers = set()
        for i, h, pointers in self._pending:
            pointers[i] = self.lib.cudaIpcOpenMemHandle(cudaIpcMemHandle_t.from_buffer_copy(h)).value
            peers.add(i)
        self._pending = []
        for peer in sorted(peers):
            self.lib.cudaDeviceEnablePeerAccess(peer)

    @contextlib.contextmanager
    def capture(self):
        try:
            self._IS_CAPTURING = True
            yield
        finally:
            self._IS_CAPTURING = False
            self.register_graph_buffers()

    def graph_buffer_handles(self):
        """The base of every graph-pool segment the captured all-reduces read, exported."""
        bases = []
        base, size = ctypes.c_uint64(), ctypes.c_uint64()
        for ptr in self._graph_inputs:
            if _crt.rt().c10.c10sim_segment_of(ptr, ctypes.byref(base), ctypes.byref(size)) and base.value not in bases:
                bases.append(base.value)
        self._graph_inputs = []
        return [bytes(self.lib.cudaIpcGetMemHandle(_VP(b))) for b in bases]

    def open_graph_buffers(self, handles):
        all_handles = [None] * self.world_size
        dist.all_gather_object(all_handles, handles)
        for i, hs in enumerate(all_handles):
            if i != self.rank:
                for h in hs:
                    self.lib.cudaIpcOpenMemHandle(cudaIpcMemHandle_t.from_buffer_copy(h))

    def custom_all_reduce(self, inp):
        if self._pending:
            # The first all-reduce is a collective: every rank is here before any maps its
            # peers' buffers, and all have mapped them before any goes on.
            dist.barrier()
            self.open_peers()
            dist.barrier()
        if self._IS_CAPTURING:
            self._graph_inputs.append(inp.data_ptr())
        return torch.empty_like(inp)
