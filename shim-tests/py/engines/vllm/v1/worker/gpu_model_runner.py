"""vllm/v1/worker/gpu_model_runner.py (simulated): GPUModelRunner's persistent input buffers,
load_model, profile_run / _dummy_run, the KV cache (initialize_kv_cache ->
initialize_kv_cache_tensors -> _allocate_kv_cache_tensors: one int8 tensor per KVCacheTensor)
and capture_model (CUDAGraphWrapper per size, inside graph_capture)."""
import dataclasses
import time

import torch
from simtruth import say, truth

from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.distributed.parallel_state import get_tp_group, graph_capture
from vllm.model_executor.model_loader import get_model_loader


@dataclasses.dataclass
class KVCacheTensor:
    size: int
    shared_by: list


@dataclasses.dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list


class GPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config, self.device = vllm_config, device
        self.shape = vllm_config.shape()
        n, seqs = vllm_config.max_num_batched_tokens, vllm_config.max_num_seqs
        # Persistent buffers (CpuGpuBuffer's device halves).
        self.input_ids = torch.zeros(n, dtype=torch.int32, device=device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=device)
        self.query_start_loc = torch.zeros(seqs + 1, dtype=torch.int32, device=device)
        self.seq_lens = torch.zeros(seqs, dtype=torch.int32, device=device)
        self.slot_mapping = torch.zeros(n, dtype=torch.int64, device=device)
        self.kv_caches = {}

    def load_model(self, eep_scale_up=False):
        t = time.perf_counter()
        before = torch.cuda.memory_allocated()
        with truth.category("weights"):
            model_loader = get_model_loader()
            self.model = model_loader.load_model(vllm_config=self.vllm_config, model_config=self.shape)
        self.model_memory_usage = torch.cuda.memory_allocated() - before
        say(f"[rank {get_tp_group().rank}] Model loading took {self.model_memory_usage / 2**30:.2f} GiB "
            f"and {time.perf_counter() - t:.3f} s")

    def _dummy_run(self, num_tokens):
        return self.model.forward(num_tokens, all_reduce=get_tp_group().all_reduce)

    def _dummy_sampler_run(self, hidden_states):
        return torch.empty(self.vllm_config.max_num_seqs, self.shape.vocab // self.shape.tp, dtype=torch.float32,
                           device=self.device)

    def profile_run(self):
        hidden_states = self._dummy_run(self.vllm_config.max_num_batched_tokens)
        logits = self._dummy_sampler_run(hidden_states)
        torch.cuda.synchronize()
        del hidden_states, logits

    def page_size_bytes(self):
        return self.vllm_config.block_size * self.shape.kv_heads_per_rank() * 128 * 2 * 2

    def get_kv_cache_config(self, available_memory):
        per_layer = self.page_size_bytes()
        num_blocks = max(0, int(available_memory) // (per_layer * self.shape.layers))
        tensors = [KVCacheTensor(num_blocks * per_layer, [f"model.layers.{i}.self_attn.attn"])
                   for i in range(self.shape.layers)]
        return KVCacheConfig(num_blocks, tensors)

    def initialize_kv_cache(self, kv_cache_config):
        self.kv_cache_config = kv_cache_config
        self.initialize_kv_cache_tensors(kv_cache_config)

    def initialize_kv_cache_tensors(self, kv_cache_config):
        kv_cache_raw_tensors = self._allocate_kv_cache_tensors(kv_cache_config)
        kv_caches = self._reshape_kv_cache_tensors(kv_cache_config, kv_cache_raw_tensors)
        self.kv_caches = kv_caches
        return kv_caches

    def _allocate_kv_cache_tensors(self, kv_cache_config):
        kv_cache_raw_tensors = {}
        for kv_cache_tensor in kv_cache_config.kv_cache_tensors:
            tensor = torch.zeros(kv_cache_tensor.size, dtype=torch.int8, device=self.device)
            for layer_name in kv_cache_tensor.shared_by:
                kv_cache_raw_tensors[layer_name] = tensor
        return kv_cache_raw_tensors

    def _reshape_kv_cache_tensors(self, kv_cache_config, kv_cache_raw_tensors):
        return {name: t.view(-1) for name, t in kv_cache_raw_tensors.items()}

    def _graph_workspace_bytes(self, num_tokens):
        """Simulation: --graph-workspace-mib at a largest size of 512, in proportion to the
        largest size captured (the first, `num_tokens`)."""
        return (self.vllm_config.graph_workspace_mib << 20) * num_tokens // 512

    def profile_cudagraph_memory(self):
        """vllm 0.33 GPUModelRunner.profile_cudagraph_memory: the two largest sizes captured
        into a throwaway pool, each between two free-memory queries; the first capture's cost
        plus the second's (at least 1 MiB) for each further graph is the estimate. The pool
        is given back afterwards."""
        sizes = sorted(self.vllm_config.cudagraph_capture_sizes, reverse=True)
        if not sizes:
            return 0
        wrapper = CUDAGraphWrapper(self._dummy_run, self._graph_workspace_bytes)
        profiling_pool = wrapper.graph_pool
        samples = []
        # vLLM captures inside graph_capture(); the simulation captures on a side stream without
        # the simulated custom all-reduce's buffer registration (its IPC opens of the peers'
        # graph buffers, which the real capture after the KV cache makes).
        with truth.category("graphs"), torch.cuda.stream(torch.cuda.Stream()):
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            for num_tokens in sizes[:2]:
                mem_before = torch.cuda.mem_get_info()[0]
                wrapper(num_tokens)
                torch.cuda.synchronize()
                samples.append(mem_before - torch.cuda.mem_get_info()[0])
        CUDAGraphWrapper.clear_all_graphs()
        CUDAGraphWrapper._all_instances.remove(wrapper)
        del wrapper
        import torch._cuda_runtime as _crt
        _crt.rt().c10.c10sim_release_pool(profiling_pool)
        torch.cuda.empty_cache()
        per_graph = max(samples[1] if len(samples) > 1 else 0, 1 << 20)
        estimate = samples[0] + per_graph * (len(sizes) - 1)
        say(f"[rank {get_tp_group().rank}] Estimated CUDA graph memory: {estimate / 2**30:.2f} GiB total")
        return int(estimate)

    def capture_model(self):
        start_time = time.perf_counter()
        start_free_gpu_memory = torch.cuda.mem_get_info()[0]
        with truth.category("graphs"), graph_capture(device=self.device):
            self._capture_cudagraphs()
        end_free_gpu_memory = torch.cuda.mem_get_info()[0]
        say(f"[rank {get_tp_group().rank}] Graph capturing finished in {time.perf_counter() - start_time:.2f} "
            f"secs, took {(start_free_gpu_memory - end_free_gpu_memory) / 2**30:.2f} GiB")

    def _capture_cudagraphs(self):
        self.cudagraph_wrapper = CUDAGraphWrapper(self._dummy_run, self._graph_workspace_bytes)
        for num_tokens in sorted(self.vllm_config.cudagraph_capture_sizes, reverse=True):
            self.cudagraph_wrapper(num_tokens)
