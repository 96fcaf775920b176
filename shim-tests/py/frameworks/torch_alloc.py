"""Real PyTorch (2.15, NVIDIA's libcudart 13.2) on the simulated driver: a small training-like
sequence through one allocator, and what torch itself says about its memory, for the test to
compare with culedger's report.

Usage: torch_alloc.py OUT.json   (PYTORCH_CUDA_ALLOC_CONF chooses the allocator)

Kernels do not run on the fake (results are garbage by design); allocation, caching, frees,
empty_cache, mem_get_info and the snapshot are torch's own code over the driver.
"""
import json
import sys

import torch

MIB = 1 << 20


def load_weights():
    """Large, long-lived tensors: each its own segment in the caching allocator."""
    return [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(3)]


def run_step(weights):
    """Temporaries of a step: a big activation (freed at the end of the step, cached) and small
    tensors from the small pool; a few element-wise ops (no-op kernels on the fake)."""
    act = torch.empty(200 * MIB, dtype=torch.uint8, device="cuda")
    small = [torch.zeros(1000, device="cuda") for _ in range(4)]
    for s in small:
        s.add_(1)
    out = torch.ones(3 * MIB, dtype=torch.uint8, device="cuda")
    del act
    return small, out


def release_cache():
    """What SGLang's get_available_gpu_memory does first: give cached blocks back."""
    torch.cuda.empty_cache()


def probe_free_memory():
    free, total = torch.cuda.mem_get_info()
    return free, total


def main():
    out_path = sys.argv[1]
    assert torch.cuda.is_available(), "torch sees no CUDA device on the fake driver"
    weights = load_weights()
    small, out = run_step(weights)
    reserved_before_empty = torch.cuda.memory_reserved()
    release_cache()
    allocated = torch.cuda.memory_allocated()
    free, total = probe_free_memory()
    if torch.cuda.get_allocator_backend() == "native":
        segments = [
            {"address": s["address"], "total_size": s["total_size"], "segment_type": s["segment_type"]}
            for s in torch.cuda.memory_snapshot()
        ]
    else:
        segments = None  # cudaMallocAsync tracks no blocks: torch refuses the snapshot
    figures = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "allocator": torch.cuda.get_allocator_backend(),
        "reserved": torch.cuda.memory_reserved(),
        "max_reserved": torch.cuda.max_memory_reserved(),
        "allocated": allocated,
        "max_allocated": torch.cuda.max_memory_allocated(),
        "reserved_before_empty_cache": reserved_before_empty,
        "free": free,
        "total": total,
        "segments": segments,
        "live_tensors": len(weights) + len(small) + 1,
    }
    with open(out_path, "w") as f:
        json.dump(figures, f)
    print(f"RESULT reserved={figures['reserved']} max_reserved={figures['max_reserved']} "
          f"segments={len(segments or [])} free={free}", flush=True)


if __name__ == "__main__":
    main()
