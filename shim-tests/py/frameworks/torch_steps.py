"""`make bench`: a step loop of real PyTorch (2.15) on the simulated driver, timed per step in
this thread's CPU time, for the bench to compare with and without culedger.

Each step: a large activation (its own segment), small temporaries, an output, the free memory
asked (a scheduler's check), and every eighth step the cache given back (so the next step
allocates and frees through the driver again). Kernels do not run on the fake.

Usage: torch_steps.py BATCHES STEPS   prints RESULT ns=<ns per step> per batch, after a warm-up
batch.
"""
import sys
import time

import torch

MIB = 1 << 20


def step(i, weights):
    act = torch.empty(24 * MIB, dtype=torch.uint8, device="cuda")
    small = [torch.empty(256 << 10, dtype=torch.uint8, device="cuda") for _ in range(4)]
    out = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
    torch.cuda.mem_get_info()
    del act, small
    if i % 8 == 7:
        torch.cuda.empty_cache()
    return out


def main():
    batches, steps = int(sys.argv[1]), int(sys.argv[2])
    assert torch.cuda.is_available(), "torch sees no CUDA device on the fake driver"
    weights = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(4)]
    for i in range(steps):
        step(i, weights)
    for _ in range(batches):
        t0 = time.thread_time_ns()
        for i in range(steps):
            step(i, weights)
        print("RESULT ns=%.1f" % ((time.thread_time_ns() - t0) / steps), flush=True)


if __name__ == "__main__":
    main()
