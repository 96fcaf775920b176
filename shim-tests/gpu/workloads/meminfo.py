"""Check 2: hold 1 GiB, ask torch.cuda.mem_get_info(), and keep holding while the kit reads
nvidia-smi."""
import os

from common import finish, kit, wait_for_kit

import torch  # noqa: E402

dev = torch.cuda.current_device()
held = torch.empty(1 << 30, dtype=torch.uint8, device=f"cuda:{dev}")
torch.cuda.synchronize(dev)
free, total = torch.cuda.mem_get_info(dev)
kit(pid=os.getpid(), device=dev, free=free, total=total, held=held.numel())
wait_for_kit()
finish()
