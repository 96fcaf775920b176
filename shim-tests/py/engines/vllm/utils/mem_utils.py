"""vllm/utils/mem_utils.py (simulated): MemorySnapshot and memory_profiling as vLLM defines
them: a snapshot asks the driver (torch.cuda.mem_get_info) and the allocator; the profile's
non-KV memory is the weights plus the peak increase of the allocator's allocated bytes plus the
increase of memory not owned by torch."""
import contextlib
import dataclasses
import gc

import torch


class MemorySnapshot:
    def __init__(self):
        self.measure()

    def measure(self):
        self.free_memory, self.total_memory = torch.cuda.mem_get_info()
        self.cuda_memory = self.total_memory - self.free_memory
        stats = torch.cuda.memory_stats()
        self.torch_peak = stats["allocated_bytes.all.peak"]
        self.torch_memory = torch.cuda.memory_reserved()
        self.non_torch_memory = self.cuda_memory - self.torch_memory


@dataclasses.dataclass
class MemoryProfilingResult:
    before_create: MemorySnapshot = None
    before_profile: MemorySnapshot = None
    after_profile: MemorySnapshot = None
    weights_memory: int = 0
    torch_peak_increase: int = 0
    non_torch_increase: int = 0
    non_kv_cache_memory: int = 0


@contextlib.contextmanager
def memory_profiling(baseline_snapshot, weights_memory):
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    result = MemoryProfilingResult(before_create=baseline_snapshot, weights_memory=weights_memory)
    result.before_profile = MemorySnapshot()
    yield result
    gc.collect()
    torch.cuda.empty_cache()
    result.after_profile = MemorySnapshot()
    result.torch_peak_increase = result.after_profile.torch_peak - result.before_profile.torch_peak
    result.non_torch_increase = result.after_profile.non_torch_memory - baseline_snapshot.non_torch_memory
    result.non_kv_cache_memory = result.non_torch_increase + result.torch_peak_increase + weights_memory
