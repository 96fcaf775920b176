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
    kv_cache_memory_bytes: int = None
    max_model_len: int = None
    graph_workspace_mib: int = 0
    model_mib: int = 4096
    layers: int = 32
    model: str = None
    dist_init_dir: str = None
    truth_dir: str = None

    def shape(self):
        if self.model:
            return LlamaShape.from_config(self.model, self.tensor_parallel_size)
        return LlamaShape.for_budget(self.model_mib, self.tensor_parallel_size, self.layers)

    def resolved_max_model_len(self):
        """ModelConfig.max_model_len: --max-model-len, else what the model's config allows
        (vllm/config/model.py _get_and_verify_max_len: max_position_embeddings)."""
        return self.max_model_len or self.shape().context_len


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
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=None,
                   help="the longest request (prompt and output) in tokens; default: the model's "
                        "max_position_embeddings")
    p.add_argument("--model", default=None,
                   help="the model's directory; its config.json gives the shape (else --model-mib and --layers)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV cache block (CacheConfig.block_size)")
    p.add_argument("--kv-cache-memory-bytes", type=int, default=None,
                   help="the KV cache's size; skips the memory profiling (CacheConfig.kv_cache_memory_bytes)")
    p.add_argument("--max-cudagraph-capture-size", type=int, default=None,
                   help="the largest batch captured (CompilationConfig.max_cudagraph_capture_size)")
    p.add_argument("--cudagraph-capture-sizes", type=lambda v: [int(x) for x in v.split(",") if x], default=None,
                   help="the batch sizes captured, comma-separated (CompilationConfig.cudagraph_capture_sizes)")
    p.add_argument("--graph-workspace-mib", type=int, default=0,
                   help="simulation: what the capture of the largest size takes from the graph pool at a largest "
                        "size of 512, in proportion to the largest size captured")
    p.add_argument("--model-mib", type=int, default=4096, help="weights per rank, MiB (simulation)")
    p.add_argument("--layers", type=int, default=32, help="decoder layers (simulation)")
    p.add_argument("--dist-init-dir", default=None)
    p.add_argument("--truth-dir", default=None)
    a = p.parse_args(argv)
    sizes = capture_sizes(a.max_num_seqs, a.max_num_batched_tokens, a.max_cudagraph_capture_size,
                          a.cudagraph_capture_sizes)
    return VllmConfig(tensor_parallel_size=a.tensor_parallel_size, gpu_memory_utilization=a.gpu_memory_utilization,
                      disable_custom_all_reduce=a.disable_custom_all_reduce or a.allreduce == "nccl",
                      enable_sleep_mode=a.enable_sleep_mode, enforce_eager=a.enforce_eager,
                      max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=a.max_num_seqs,
                      cudagraph_capture_sizes=tuple(sizes), kv_cache_memory_bytes=a.kv_cache_memory_bytes,
                      max_model_len=a.max_model_len, graph_workspace_mib=a.graph_workspace_mib,
                      model_mib=a.model_mib, layers=a.layers, model=a.model, block_size=a.block_size,
                      dist_init_dir=a.dist_init_dir, truth_dir=a.truth_dir)


def capture_sizes(max_num_seqs, max_num_tokens, max_size=None, sizes=None):
    """The batch sizes CUDA graphs are captured for, as vLLM 0.33 chooses them
    (config/vllm.py VllmConfig._set_cudagraph_sizes): the sizes given, else 1, 2, 4, then steps
    of 8 below 256 and of 16 from 256, up to the largest size (vLLM's default min(2 x
    max_num_seqs, 512); never above max_num_batched_tokens). Without either flag the simulation
    keeps its own short list (1 to 32), which its other start-ups were recorded with."""
    if sizes:
        return sorted(set(sizes))
    if max_size is None:
        return [1, 2, 4, 8, 16, 32]
    top = min(max_size, max_num_tokens)
    out = [s for s in (1, 2, 4) if s <= top]
    if top >= 8:
        out += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        out += list(range(256, top + 1, 16))
    return out
