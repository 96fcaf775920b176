"""Self-test of check 6b: an XLA-like allocation through the driver API (cuMemAlloc_v2 on the
primary context, as XLA's StreamExecutor does)."""
import ctypes
import os
import sys

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from common import finish, kit  # noqa: E402

import simcuda as cu  # noqa: E402

NBYTES = 64 << 20
cu.driver_context(0)
p = ctypes.c_uint64()
cu.check(cu.drv.cuMemAlloc_v2(ctypes.byref(p), NBYTES), "cuMemAlloc_v2")
kit(pid=os.getpid(), device=0, bytes=NBYTES, jax="simulated")
finish()
