"""Check 6a: one CuPy array (CuPy's memory pool allocates through the CUDA runtime)."""
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
