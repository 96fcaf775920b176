"""`make bench`: step loops of real PyTorch (2.15) on the simulated driver, timed per step in
this thread's CPU time, for the bench to compare with and without culedger.

Two loops (the first argument):
- `cached`: a decode step's tensors through the caching allocator once it is warm: a large
  activation, small temporaries, an output, an element-wise op, the free memory asked (a
  scheduler's check). No segment is allocated once warm: only the free-memory query reaches
  the driver (checked here with torch's own `segment.all.allocated` counter).
- `miss`: the same step with the cache given back at its end, so that every step allocates and
  frees its segments through the driver again (checked: at least one new segment per step).

Kernels do not run on the fake (results are garbage by design; the launches still go through
torch and the driver).

Usage: torch_steps.py MODE BATCHES STEPS   prints RESULT ns=<ns per step> per batch, after a
warm-up batch.
"""
import sys
import time

import torch

MIB = 1 << 20


def step(weights):
    act = torch.empty(24 * MIB, dtype=torch.uint8, device="cuda")
    small = [torch.empty(256 << 10, dtype=torch.uint8, device="cuda") for _ in range(4)]
    out = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
    out.add_(1)
    torch.cuda.mem_get_info()
    del act, small
    return out


def segments():
    return torch.cuda.memory_stats().get("segment.all.allocated", 0)


def main():
    mode, batches, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    assert mode in ("cached", "miss"), f"mode {mode!r}: cached or miss"
    assert torch.cuda.is_available(), "torch sees no CUDA device on the fake driver"
    weights = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(4)]
    miss = mode == "miss"

    def run():
        for _ in range(steps):
            out = step(weights)
            del out
            if miss:
                torch.cuda.empty_cache()

    run()
    for _ in range(batches):
        before = segments()
        t0 = time.thread_time_ns()
        run()
        ns = (time.thread_time_ns() - t0) / steps
        grown = segments() - before
        if miss:
            assert grown >= steps, f"miss loop: {grown} new segments over {steps} steps"
        else:
            assert grown == 0, f"cached loop: {grown} new segments once warm"
        print("RESULT ns=%.1f" % ns, flush=True)


if __name__ == "__main__":
    main()
