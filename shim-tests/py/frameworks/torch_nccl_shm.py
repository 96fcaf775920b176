"""Real PyTorch's NCCL backend (NVIDIA's NCCL 2.30) with two ranks on two simulated devices, made
to connect through NCCL's shared-memory transport as SGLang's default NCCL_CUMEM_ENABLE=0 does
when peer-to-peer is off: the transport maps a /dev/shm segment into each device
(cudaHostRegister(..., Portable | Mapped), cudaHostGetDevicePointer: src/transport/shm.cc).
Each rank runs one all_reduce (connections are made at the first collective) and destroys the
group. Writes each rank's status; NCCL_DEBUG=INFO in the environment prints the channels' "via
SHM" lines. Usage: torch_nccl_shm.py OUT.json STORE_FILE
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, store, results):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=2,
                            device_id=torch.device(f"cuda:{rank}"))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    results.put({"rank": rank, "pid": os.getpid()})


def main():
    out, store = sys.argv[1], sys.argv[2]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, store, results)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    codes = [p.exitcode for p in procs]
    ranks = sorted(results.get(timeout=5)["rank"] for _ in range(codes.count(0)))
    with open(out, "w") as f:
        json.dump({"exitcodes": codes, "ranks": ranks}, f)
    print(f"RESULT ranks_done={len(ranks)}", flush=True)
    sys.exit(0 if codes == [0, 0] else 1)


if __name__ == "__main__":
    main()
