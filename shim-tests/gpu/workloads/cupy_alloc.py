"""Check 6a: one CuPy array (CuPy's memory pool: cudaMalloc of NVIDIA's runtime before CuPy 14, the
driver's cuMemAlloc_v2 from CuPy 14 on, whose runtime module is built on the driver)."""
import os

from common import finish, kit, skip

try:
    import cupy as cp
except ImportError as e:
    skip(f"CuPy is not installed ({e})")

NBYTES = 64 << 20
cp.cuda.Device(0).use()
x = cp.zeros(NBYTES // 4, dtype=cp.float32)
cp.cuda.runtime.deviceSynchronize()
kit(pid=os.getpid(), device=0, bytes=int(x.nbytes), cupy=cp.__version__)
finish()
