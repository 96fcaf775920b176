"""Real PyTorch (2.15, NVIDIA's libcudart 13.2) CUDA IPC on the simulated driver: a CUDA tensor
put on a `torch.multiprocessing` queue (spawn start method) by this process and summed by a
spawned consumer, with what torch says about the tensor's block, for the test to compare with
both processes' culedger reports.

Usage: torch_ipc.py OUT.json

torch's reductions (torch/multiprocessing/reductions.py, reduce_tensor -> storage._share_cuda_)
export the caching allocator's whole block with cudaIpcGetMemHandle and an interprocess event
recorded on the producer's stream (cudaIpcGetEventHandle); the consumer opens both
(cudaIpcOpenMemHandle, cudaIpcOpenEventHandle) and waits on the event before using the storage.
Kernels do not run on the fake, so the sum is garbage by design.
"""
import json
import os
import sys

import torch
import torch.multiprocessing as mp

MIB = 1 << 20
SIZE = 48 * MIB


def sum_tensor(queue, results):
    """The consumer: receive the tensor (the IPC open happens in the unpickling), sum it."""
    t = queue.get(timeout=60)  # an export that failed in the producer's feeder thread never comes
    total = float(t.sum().item())
    results.put({"pid": os.getpid(), "nbytes": t.numel() * t.element_size(),
                 "device": t.device.index, "sum": total})
    del t
    torch.cuda.synchronize()


def export_tensor():
    """The producer's tensor: its own segment of the caching allocator."""
    return torch.ones(SIZE // 4, dtype=torch.float32, device="cuda")


def main():
    out_path = sys.argv[1]
    assert torch.cuda.is_available(), "torch sees no CUDA device on the fake driver"
    ctx = mp.get_context("spawn")
    t = export_tensor()
    queue, results = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=sum_tensor, args=(queue, results))
    child.start()
    queue.put(t)
    got = None
    while got is None and child.is_alive():
        try:
            got = results.get(timeout=1)
        except Exception:  # queue.Empty: the consumer is still at work
            pass
    child.join(timeout=300)
    assert got is not None, f"the consumer gave no result (exit code {child.exitcode})"
    assert child.exitcode == 0, f"consumer exit code {child.exitcode}"
    ptr = t.data_ptr()
    block = [s for s in torch.cuda.memory_snapshot()
             if s["address"] <= ptr < s["address"] + s["total_size"]]
    assert len(block) == 1, block
    figures = {
        "torch": torch.__version__,
        "exporter_pid": os.getpid(),
        "consumer": got,
        "tensor_ptr": ptr,
        "tensor_bytes": t.numel() * t.element_size(),
        "segment_address": block[0]["address"],
        "segment_bytes": block[0]["total_size"],
        "reserved": torch.cuda.memory_reserved(),
    }
    with open(out_path, "w") as f:
        json.dump(figures, f)
    print(f"RESULT segment_bytes={figures['segment_bytes']} consumer_pid={got['pid']}", flush=True)


if __name__ == "__main__":
    main()
