"""sglang/srt/model_executor/model_runner.py (simulated): ModelRunner of SGLang 0.4/0.5, the
order in which a rank takes its memory:

  init_torch_distributed  set_device, a query, the process group, a distributed query (the
                          "total" the pool is sized against), the TP group (PyNccl, custom AR)
  load_model              a query; DefaultModelLoader.load_model: parameters on the device,
                          copied from host, a repacking scratch freed again; a query
  init_cublas             warm-up: cuBLAS workspace and one forward pass whose activations the
                          next query's empty_cache releases
  init_memory_pool        profile_max_num_token (a distributed query: the sizing query), then
                          ReqToTokenPool, MHATokenToKVPool (K and V per layer), the allocator
  init_attention_backend  the attention workspace
  init_cuda_graphs        a query, CudaGraphRunner (static buffers, captures), a query; then
                          prealloc_symmetric_memory_pool (--enable-symm-mem: sglang 0.5.23's
                          finalize_cuda_graph_capture, model_runner_components/cuda_graph_setup.py)

A draft worker's runner (``is_draft_worker``: speculative decoding) shares the target's process
group and loads only its weights; the draft's own KV pool, which SGLang's pool sizing counts in
the target's cell size (pool_configurator.py, eagle_draft_num_layers), is left out. With
``defer_memory_pool`` the runner stops after its weights and cuBLAS, and ``finish_initialize``
does the rest (the order of sglang 0.5.23: managers/scheduler.py builds the draft worker in
init_model_worker, before init_memory_pools).

The ground truth of each step is marked with simtruth's category(); culedger sees none of it."""
import os

import torch
from simtruth import say, truth

from sglang.srt.distributed.device_communicators.pynccl_allocator import prealloc_symmetric_memory_pool
from sglang.srt.distributed import (get_tp_group, init_distributed_environment, initialize_model_parallel,
                                    set_custom_all_reduce)
from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang.srt.model_loader import get_model_loader
from sglang.srt.utils import get_available_gpu_memory


def log(rank, text):
    say(f"[rank {rank}] {text}")


class ModelRunner:
    def __init__(self, model_config, mem_fraction_static, gpu_id, tp_rank, tp_size, server_args,
                 is_draft_worker=False, defer_memory_pool=False):
        self.model_config = model_config
        self.is_draft_worker = is_draft_worker
        self.mem_fraction_static = mem_fraction_static
        self.device = "cuda"
        self.gpu_id, self.tp_rank, self.tp_size = gpu_id, tp_rank, tp_size
        self.server_args = server_args
        self.page_size = 1
        self.kv_cache_dtype = torch.bfloat16
        if is_draft_worker:
            self.load_model()
            return
        self.min_per_gpu_memory = self.init_torch_distributed()
        self.initialize(self.min_per_gpu_memory, defer_memory_pool)

    def initialize(self, min_per_gpu_memory, defer_memory_pool=False):
        self.load_model()
        self.init_cublas()
        if not defer_memory_pool:
            self.finish_initialize()

    def finish_initialize(self):
        self.init_memory_pool(self.min_per_gpu_memory, self.server_args.max_running_requests,
                              self.server_args.max_total_tokens)
        self.init_attention_backend()
        self.init_cuda_graphs()
        prealloc_symmetric_memory_pool(is_draft_worker=self.is_draft_worker,
                                       enable_symm_mem=self.server_args.enable_symm_mem, device=self.device)

    def init_torch_distributed(self):
        torch.cuda.set_device(self.gpu_id)
        before_avail_memory = get_available_gpu_memory(self.device, self.gpu_id)
        set_custom_all_reduce(not self.server_args.disable_custom_all_reduce)
        init_distributed_environment(backend="nccl", world_size=self.tp_size, rank=self.tp_rank,
                                     local_rank=self.gpu_id,
                                     distributed_init_method="file://" + os.path.abspath(self.server_args.dist_init_dir))
        min_per_gpu_memory = get_available_gpu_memory(self.device, self.gpu_id, distributed=self.tp_size > 1)
        initialize_model_parallel(tensor_model_parallel_size=self.tp_size)
        self.tp_group = get_tp_group()
        log(self.tp_rank, f"GPU {self.gpu_id}: {before_avail_memory:.2f} GiB free before init, "
                          f"{min_per_gpu_memory:.2f} GiB after")
        return min_per_gpu_memory

    def load_model(self):
        before = get_available_gpu_memory(self.device, self.gpu_id)
        with truth.category("weights"):
            self.loader = get_model_loader()
            self.model = self.loader.load_model(model_config=self.model_config, device_config=self.device)
        after = get_available_gpu_memory(self.device, self.gpu_id)
        log(self.tp_rank, f"Load weight end. mem usage={before - after:.2f} GB, avail mem={after:.2f} GB")

    def init_cublas(self):
        """A small matmul initialises cuBLAS (its workspace comes from the caching allocator and
        stays); one forward pass warms the kernels up."""
        dtype = torch.float16
        a = torch.ones((16, 16), dtype=dtype, device="cuda")
        b = torch.ones((16, 16), dtype=dtype, device="cuda")
        self.cublas_workspace = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
        c = a @ b
        self.model.forward(256)  # single-rank kernels only: no collective yet
        return c

    def profile_max_num_token(self, total_gpu_memory):
        available_gpu_memory = get_available_gpu_memory(self.device, self.gpu_id, distributed=self.tp_size > 1)
        cell_size = self.model_config.shape.kv_cell_bytes()
        rest_memory = available_gpu_memory - total_gpu_memory * (1 - self.mem_fraction_static)
        max_num_token = int(rest_memory * (1 << 30)) // cell_size
        log(self.tp_rank, f"available {available_gpu_memory:.2f} GiB, KV pool gets {rest_memory:.2f} GiB "
                          f"(mem_fraction_static={self.mem_fraction_static})")
        return max_num_token

    def init_memory_pool(self, total_gpu_memory, max_num_reqs=None, max_total_tokens=None):
        with truth.category("kv_pool"):
            self.max_total_num_tokens = self.profile_max_num_token(total_gpu_memory)
            if max_total_tokens is not None:
                self.max_total_num_tokens = min(self.max_total_num_tokens, max_total_tokens)
            if max_num_reqs is None:
                max_num_reqs = min(max(int(self.max_total_num_tokens / self.model_config.context_len * 512), 2048),
                                   4096)
            if self.max_total_num_tokens <= 0:
                raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")
            self.req_to_token_pool = ReqToTokenPool(size=max_num_reqs + 1,
                                                    max_context_len=self.model_config.context_len + 4,
                                                    device=self.device)
            s = self.model_config.shape
            self.token_to_kv_pool = MHATokenToKVPool(self.max_total_num_tokens, page_size=self.page_size,
                                                     dtype=self.kv_cache_dtype, head_num=s.kv_heads_per_rank(),
                                                     head_dim=self.model_config.head_dim, layer_num=s.layers,
                                                     device=self.device)
            self.token_to_kv_pool_allocator = TokenToKVPoolAllocator(self.max_total_num_tokens,
                                                                     dtype=self.kv_cache_dtype, device=self.device,
                                                                     kvcache=self.token_to_kv_pool)
            # sglang model_runner.py init_memory_pool's own line.
            log(self.tp_rank, f"KV Cache is allocated. #tokens: {self.max_total_num_tokens}")

    def init_attention_backend(self):
        self.attn_backend = FlashInferAttnBackend(self)

    def init_cuda_graphs(self):
        self.cuda_graph_runner = None
        if self.server_args.disable_cuda_graph:
            return
        before = get_available_gpu_memory(self.device, self.gpu_id)
        with truth.category("graphs"):
            self.cuda_graph_runner = CudaGraphRunner(self)
        after = get_available_gpu_memory(self.device, self.gpu_id)
        log(self.tp_rank, f"Capture cuda graph end. mem usage={before - after:.2f} GB, avail mem={after:.2f} GB")
