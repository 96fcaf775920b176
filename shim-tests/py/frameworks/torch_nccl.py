"""Real PyTorch's NCCL backend at world size 1 on the simulated driver: torch.distributed with
NVIDIA's libnccl.so.2 (nvidia-nccl-cu13), one all_reduce, the communicator destroyed. Writes
torch's figures and the simulated device's used bytes around the communicator's creation.
Usage: torch_nccl.py OUT.json STORE_FILE
"""
import json
import sys

import torch
import torch.distributed as dist


def used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def make_communicator(store):
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))


def all_reduce(x):
    dist.all_reduce(x)
    torch.cuda.synchronize()


def main():
    out, store = sys.argv[1], sys.argv[2]
    torch.cuda.set_device(0)
    x = torch.ones(1 << 20, device="cuda")
    before = used()
    reserved_before = torch.cuda.memory_reserved()
    make_communicator(store)
    all_reduce(x)
    figures = {
        "used_before": before,
        "used_after": used(),
        "reserved_before": reserved_before,
        "reserved": torch.cuda.memory_reserved(),
    }
    dist.destroy_process_group()
    figures["used_destroyed"] = used()
    with open(out, "w") as f:
        json.dump(figures, f)
    print(f"RESULT comm_used={figures['used_after'] - before}", flush=True)


if __name__ == "__main__":
    main()
