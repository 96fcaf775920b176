"""vllm/v1/worker/gpu_worker.py (simulated), after vLLM's Worker: NCCL and the custom all-reduce
first, then the initial memory snapshot, the model runner, the weights; a profile run between
two snapshots sizes the KV cache; the KV cache tensors; CUDA graphs last. With sleep mode the
weights and the KV cache come from CuMemAllocator's pools (cuMemCreate + cuMemMap)."""
import contextlib
import gc

import torch
from simtruth import say, truth

from vllm import envs
from vllm.distributed.parallel_state import ensure_model_parallel_initialized, init_distributed_environment
from vllm.utils.mem_utils import MemorySnapshot, memory_profiling


class Worker:
    def __init__(self, vllm_config, local_rank, rank, distributed_init_method):
        self.vllm_config, self.local_rank, self.rank = vllm_config, local_rank, rank
        self.distributed_init_method = distributed_init_method

    def _maybe_get_memory_pool_context(self, tag):
        if self.vllm_config.enable_sleep_mode:
            from vllm.device_allocator.cumem import CuMemAllocator
            return CuMemAllocator.get_instance().use_memory_pool(tag=tag)
        return contextlib.nullcontext()

    def init_device(self):
        self.device = torch.device(f"cuda:{self.local_rank}")
        torch.cuda.set_device(self.device)
        init_distributed_environment(self.vllm_config.tensor_parallel_size, self.rank, self.distributed_init_method,
                                     self.local_rank)
        ensure_model_parallel_initialized(self.vllm_config)
        gc.collect()
        torch.cuda.empty_cache()
        self.init_snapshot = MemorySnapshot()
        self.requested_memory = self.init_snapshot.total_memory * self.vllm_config.gpu_memory_utilization
        if self.init_snapshot.free_memory < self.requested_memory:
            gib = 1 << 30
            raise ValueError(f"Free memory on device ({self.init_snapshot.free_memory / gib:.2f}/"
                             f"{self.init_snapshot.total_memory / gib:.2f} GiB) on startup is less than desired GPU "
                             f"memory utilization ({self.vllm_config.gpu_memory_utilization}, "
                             f"{self.requested_memory / gib:.2f} GiB).")
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        self.model_runner = GPUModelRunner(self.vllm_config, self.device)

    def load_model(self):
        with self._maybe_get_memory_pool_context(tag="weights"):
            self.model_runner.load_model()

    @torch.inference_mode()
    def determine_available_memory(self):
        gib = 1 << 30
        if self.vllm_config.kv_cache_memory_bytes:
            # vllm 0.33: still a profile run (it compiles for max_num_batched_tokens), no
            # memory profiling, and the KV cache is what the flag says.
            self.model_runner.profile_run()
            say(f"[rank {self.rank}] Initial free memory {self.init_snapshot.free_memory / gib:.2f} GiB, reserved "
                f"{self.vllm_config.kv_cache_memory_bytes / gib:.2f} GiB memory for KV Cache as specified by "
                f"kv_cache_memory_bytes config and skipped memory profiling.")
            return int(self.vllm_config.kv_cache_memory_bytes)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        with memory_profiling(self.init_snapshot, weights_memory=int(self.model_runner.model_memory_usage)) as result:
            self.model_runner.profile_run()
        # vllm 0.33: the CUDA graphs estimated after the profile run whenever graphs will be
        # captured; subtracted only when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on.
        cudagraph_memory_estimate = 0
        if not self.vllm_config.enforce_eager:
            cudagraph_memory_estimate = self.model_runner.profile_cudagraph_memory()
        applied = cudagraph_memory_estimate if envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS else 0
        self.available_kv_cache_memory_bytes = self.requested_memory - result.non_kv_cache_memory - applied
        say(f"[rank {self.rank}] Available KV cache memory: {self.available_kv_cache_memory_bytes / gib:.2f} GiB "
            f"(requested {self.requested_memory / gib:.2f}, weights {result.weights_memory / gib:.2f}, "
            f"peak activation {result.torch_peak_increase / gib:.2f}, non-torch {result.non_torch_increase / gib:.2f}, "
            f"CUDA graph estimate {applied / gib:.2f} of {cudagraph_memory_estimate / gib:.2f}, "
            f"free after profiling {result.after_profile.free_memory / gib:.2f})")
        gc.collect()
        return int(self.available_kv_cache_memory_bytes)

    def initialize_from_config(self, kv_cache_config):
        with self._maybe_get_memory_pool_context(tag="kv_cache"), truth.category("kv_pool"):
            self.model_runner.initialize_kv_cache(kv_cache_config)

    def compile_or_warm_up_model(self):
        for size in (self.vllm_config.max_num_batched_tokens // 4,):
            self.model_runner._dummy_run(size)
        if not self.vllm_config.enforce_eager:
            self.model_runner.capture_model()
