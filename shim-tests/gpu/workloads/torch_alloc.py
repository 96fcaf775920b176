"""Check 1: many tensor sizes through PyTorch's caching allocator, some freed again; the allocator's
own statistics at the end. The allocator backend comes from PYTORCH_CUDA_ALLOC_CONF (the kit sets
it: native, expandable_segments:True, backend:cudaMallocAsync)."""
import argparse
import os
import random

from common import finish, kit

ap = argparse.ArgumentParser()
ap.add_argument("--mode", required=True)
ap.add_argument("--count", type=int, default=300)
args = ap.parse_args()

import torch  # noqa: E402  (after the environment is final)

dev = torch.cuda.current_device()
rng = random.Random(20261130)
keep = []
for i in range(args.count):
    # Log-uniform sizes from 512 B to 512 MiB: small blocks, 2 MiB and 20 MiB segments, large ones.
    n = int(2 ** rng.uniform(9, 29))
    keep.append(torch.empty(n, dtype=torch.uint8, device=f"cuda:{dev}"))
    if i % 3 == 2:
        keep.pop(rng.randrange(len(keep)))
torch.cuda.synchronize(dev)
kit(pid=os.getpid(), device=dev, mode=args.mode, conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    reserved=torch.cuda.memory_reserved(dev), allocated=torch.cuda.memory_allocated(dev), tensors=len(keep),
    backend=torch.cuda.get_allocator_backend())
finish()
