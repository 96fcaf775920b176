"""Self-test of check 2: hold 1 GiB, ask cudaMemGetInfo (what torch.cuda.mem_get_info calls), and
keep holding while the kit reads the machine's figures (smi.py)."""
import os
import sys

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from common import finish, kit, wait_for_kit  # noqa: E402

import simcuda as cu  # noqa: E402

cu.check(cu.rt.cudaSetDevice(0), "cudaSetDevice")
held = cu.malloc(1 << 30)
free, total = cu.mem_get_info()
kit(pid=os.getpid(), device=0, free=free, total=total, held=1 << 30)
wait_for_kit()
finish()
