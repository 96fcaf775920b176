"""Real PyTorch's first kernels on the simulated driver: NVIDIA's runtime loads torch's fatbins
with cuLibraryLoadData at start-up (lazily: nothing taken), and the driver takes a library's
memory in the context where one of its kernels is first used. Around each of a few first
operations (a fill, an add, a reduction) and a repeat of them, writes what the device's used
memory grew by and what torch's caching allocator reserved meanwhile: the difference is what the
driver took for itself. Usage: torch_lazy.py OUT.json
"""
import json
import sys

import torch


def used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def step(name, fn, steps):
    torch.cuda.synchronize()
    u0, r0 = used(), torch.cuda.memory_reserved()
    fn()
    torch.cuda.synchronize()
    u1, r1 = used(), torch.cuda.memory_reserved()
    steps.append({"name": name, "used": u1 - u0, "reserved": r1 - r0})


def main():
    out = sys.argv[1]
    torch.cuda.set_device(0)
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the context and the caching allocator's first segment
    steps = []
    box = {}
    step("fill", lambda: box.update(x=torch.ones(1 << 16, device="cuda")), steps)
    step("add", lambda: box.update(y=box["x"] + box["x"]), steps)
    step("sum", lambda: box.update(s=box["y"].sum()), steps)
    step("again", lambda: box.update(z=(torch.ones(1 << 16, device="cuda") + box["x"]).sum()), steps)
    with open(out, "w") as f:
        json.dump({"steps": steps}, f)


if __name__ == "__main__":
    main()
