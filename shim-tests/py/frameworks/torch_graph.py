"""Real PyTorch capturing a CUDA graph on the simulated driver: what is allocated during the
capture comes from the graph's private memory pool. Kernels do not run on the fake, so the
captured graph has no nodes (torch warns that it is empty); its allocations and instantiation
are real. Usage: torch_graph.py OUT.json
"""
import json
import sys
import warnings

import torch


def capture(x):
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.add_(1)  # warm-up on a side stream, as torch's docs recommend
    torch.cuda.current_stream().wait_stream(side)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.cuda.graph(g):
            y = x * 2
            buf = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    g.replay()
    return g, y, buf


def main():
    x = torch.zeros(1024, device="cuda")
    before = torch.cuda.memory_reserved()
    g, y, buf = capture(x)
    figures = {"reserved_before": before, "reserved": torch.cuda.memory_reserved(),
               "max_reserved": torch.cuda.max_memory_reserved()}
    with open(sys.argv[1], "w") as f:
        json.dump(figures, f)
    print(f"RESULT reserved={figures['reserved']} before={before}", flush=True)


if __name__ == "__main__":
    main()
