"""Self-test of check 5: what a communicator does when it starts: pinned host memory for its work
queue (cudaHostAlloc) and device buffers (cudaMalloc), from a communicator object."""
import ctypes
import os
import sys

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from common import finish, kit  # noqa: E402

import simcuda as cu  # noqa: E402


class PyNcclCommunicator:
    def __init__(self):
        host = ctypes.c_void_p()
        cu.check(cu.rt.cudaHostAlloc(ctypes.byref(host), 4 << 20, 0), "cudaHostAlloc")
        self.host = host.value
        self.buffers = [cu.malloc(8 << 20) for _ in range(4)]

    def all_reduce(self, ptr, nbytes):
        cu.check(cu.rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")


cu.check(cu.rt.cudaSetDevice(0), "cudaSetDevice")
comm = PyNcclCommunicator()
t = cu.malloc(64 << 20)
comm.all_reduce(t, 64 << 20)
kit(pid=os.getpid(), device=0, sum=1.0, nccl="simulated")
finish()
