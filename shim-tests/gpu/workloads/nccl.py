"""Check 5: a single-rank NCCL process group and one all-reduce (MASTER_ADDR/MASTER_PORT come
from the kit). The group is not destroyed: its buffers are live when the figures are taken."""
import os

from common import finish, kit

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dev = torch.cuda.current_device()
torch.cuda.set_device(dev)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device(f"cuda:{dev}"))
t = torch.ones(16 << 20, dtype=torch.float32, device=f"cuda:{dev}")
dist.all_reduce(t)
torch.cuda.synchronize(dev)
version = torch.cuda.nccl.version()
version = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
kit(pid=os.getpid(), device=dev, sum=float(t[0].item()), nccl=version)
finish()
