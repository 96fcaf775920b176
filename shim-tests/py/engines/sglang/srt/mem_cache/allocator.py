"""sglang/srt/mem_cache/allocator.py (simulated): the free-slot list of the token pool, on the
device."""
import torch


class TokenToKVPoolAllocator:
    def __init__(self, size, dtype, device, kvcache):
        self.size, self.dtype, self.device, self._kvcache = size, dtype, device, kvcache
        self.clear()

    def clear(self):
        # The padded slot 0 is used for writing dummy outputs from padded tokens.
        self.free_slots = torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device)
