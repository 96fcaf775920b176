"""Self-test of check 6a: a CuPy-like pool allocation through the runtime (cudaMalloc)."""
import os
import sys

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from common import finish, kit  # noqa: E402

import simcuda as cu  # noqa: E402

NBYTES = 64 << 20
cu.check(cu.rt.cudaSetDevice(0), "cudaSetDevice")
x = cu.malloc(NBYTES)
kit(pid=os.getpid(), device=0, bytes=NBYTES, cupy="simulated")
finish()
