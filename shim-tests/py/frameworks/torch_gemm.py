"""Real PyTorch (2.15) with NVIDIA's cuBLAS 13.4 and cuBLASLt on the simulated driver: the GEMMs
every engine's forward pass runs (torch.mm in fp32 and bf16, F.linear with a bias in bf16 and
fp32 (cuBLASLt's epilogue), a batched torch.matmul), then torch's own memory figures.

Usage: torch_gemm.py OUT.json

Kernels do not run on the fake (the products are garbage by design): what is real is cuBLAS
starting on the driver (cublasCreate, cublasLtCtxInit, its kernels' libraries, heuristics,
workspaces from torch's caching allocator) and every GEMM returning success.
"""
import json
import sys

import torch
import torch.nn.functional as F


def weights():
    return {
        "w_bf16": torch.empty(384, 512, dtype=torch.bfloat16, device="cuda"),
        "b_bf16": torch.empty(384, dtype=torch.bfloat16, device="cuda"),
        "w_fp32": torch.empty(256, 512, device="cuda"),
        "b_fp32": torch.empty(256, device="cuda"),
    }


def forward(w):
    """One GEMM of each kind; synchronize so an asynchronous failure surfaces here."""
    x32 = torch.empty(64, 512, device="cuda")
    x16 = x32.to(torch.bfloat16)
    outs = {
        "mm_fp32": torch.mm(x32, torch.empty(512, 128, device="cuda")),
        "mm_bf16": torch.mm(x16, torch.empty(512, 128, dtype=torch.bfloat16, device="cuda")),
        "linear_bf16": F.linear(x16, w["w_bf16"], w["b_bf16"]),
        "linear_fp32": F.linear(x32, w["w_fp32"], w["b_fp32"]),
        "matmul_batched": torch.matmul(torch.empty(8, 64, 32, device="cuda"), torch.empty(8, 32, 16, device="cuda")),
    }
    torch.cuda.synchronize()
    return outs


def main():
    out_path = sys.argv[1]
    assert torch.cuda.is_available(), "torch sees no CUDA device on the fake driver"
    w = weights()
    outs = forward(w)
    figures = {
        "shapes": {k: [list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in outs.items()},
        "blas_handle": torch.cuda.current_blas_handle() != 0,
        "reserved": torch.cuda.memory_reserved(),
        "max_reserved": torch.cuda.max_memory_reserved(),
        "segments": [
            {"address": s["address"], "total_size": s["total_size"]} for s in torch.cuda.memory_snapshot()
        ],
    }
    with open(out_path, "w") as f:
        json.dump(figures, f)
    print("RESULT gemms=%d" % len(outs), flush=True)


if __name__ == "__main__":
    main()
