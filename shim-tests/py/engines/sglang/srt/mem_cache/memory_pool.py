"""sglang/srt/mem_cache/memory_pool.py (simulated): ReqToTokenPool and MHATokenToKVPool
(K and V buffers per layer in _create_buffers, as in SGLang since 0.4)."""
import torch


class ReqToTokenPool:
    """A memory pool that maps a request to its token locations."""

    def __init__(self, size, max_context_len, device, enable_memory_saver=False):
        self.size, self.max_context_len, self.device = size, max_context_len, device
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32, device=device)
        self.free_slots = list(range(size))


class KVCache:
    def __init__(self, size, page_size, dtype, layer_num, device):
        self.size, self.page_size, self.dtype, self.layer_num, self.device = size, page_size, dtype, layer_num, device
        self.store_dtype = dtype


class MHATokenToKVPool(KVCache):
    def __init__(self, size, page_size, dtype, head_num, head_dim, layer_num, device):
        super().__init__(size, page_size, dtype, layer_num, device)
        self.head_num, self.head_dim = head_num, head_dim
        self._create_buffers()

    def _create_buffers(self):
        # [size, head_num, head_dim] for each layer
        # The padded slot 0 is used for writing dummy outputs from padded tokens.
        self.k_buffer = [
            torch.zeros((self.size + self.page_size, self.head_num, self.head_dim), dtype=self.store_dtype,
                        device=self.device) for _ in range(self.layer_num)
        ]
        self.v_buffer = [
            torch.zeros((self.size + self.page_size, self.head_num, self.head_dim), dtype=self.store_dtype,
                        device=self.device) for _ in range(self.layer_num)
        ]
