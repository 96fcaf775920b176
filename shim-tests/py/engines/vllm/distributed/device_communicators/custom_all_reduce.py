"""vllm/distributed/device_communicators/custom_all_reduce.py (simulated): meta and buffer
shared over IPC and opened by the peers in the constructor, rank_data from the caching
allocator, graph buffers registered after capture."""
import torch
from simcomm import CustomAllreduceBase


class CustomAllreduce(CustomAllreduceBase):
    _SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]

    def __init__(self, group, device, max_size=8192 * 1024):
        self.init_ca(device, max_size, lazy_open=False)
        self.meta_ptrs = self.create_shared_buffer(self.META_SIZE + max_size, group=group)
        self.buffer_ptrs = self.create_shared_buffer(max_size, group=group)
        self.rank_data = torch.empty(8 * 1024 * 1024, dtype=torch.uint8, device=self.device)

    def create_shared_buffer(self, size_in_bytes, group=None):
        return self.share(size_in_bytes)

    def register_graph_buffers(self):
        self.open_graph_buffers(self.graph_buffer_handles())

    def custom_all_reduce(self, input):
        """out = torch.empty_like(inp) on the way: an activation, not an IPC buffer."""
        return super().custom_all_reduce(input)
