"""vllm/config.py (simulated): what the simulation reads of VllmConfig."""
import argparse
import dataclasses

from simmodel import LlamaShape


@dataclasses.dataclass
class VllmConfig:
    tensor_parallel_size: int = 2
    gpu_memory_utilization: float = 0.9
    disable_custom_all_reduce: bool = True
    enable_sleep_mode: bool = False
    enforce_eager: bool = False
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    cudagraph_capture_sizes: tuple = (1, 2, 4, 8, 16, 32)
    model_mib: int = 4096
    layers: int = 32
    dist_init_dir: str = None
    truth_dir: str = None

    def shape(self):
        return LlamaShape.for_budget(self.model_mib, self.tensor_parallel_size, self.layers)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vllm serve")
    p.add_argument("--tensor-parallel-size", "--tp", type=int, default=2)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--allreduce", choices=["nccl", "custom"], default="custom",
                   help="vLLM enables its custom all-reduce by default; nccl = --disable-custom-all-reduce")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--enable-sleep-mode", action="store_true", help="CuMemAllocator: weights and KV cache by VMM")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--model-mib", type=int, default=4096, help="weights per rank, MiB (simulation)")
    p.add_argument("--layers", type=int, default=32, help="decoder layers (simulation)")
    p.add_argument("--dist-init-dir", default=None)
    p.add_argument("--truth-dir", default=None)
    a = p.parse_args(argv)
    return VllmConfig(tensor_parallel_size=a.tensor_parallel_size, gpu_memory_utilization=a.gpu_memory_utilization,
                      disable_custom_all_reduce=a.disable_custom_all_reduce or a.allreduce == "nccl",
                      enable_sleep_mode=a.enable_sleep_mode, enforce_eager=a.enforce_eager,
                      max_num_batched_tokens=a.max_num_batched_tokens, model_mib=a.model_mib, layers=a.layers,
                      dist_init_dir=a.dist_init_dir, truth_dir=a.truth_dir)
