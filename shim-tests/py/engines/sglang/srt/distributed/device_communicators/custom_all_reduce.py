"""sglang/srt/distributed/device_communicators/custom_all_reduce.py (simulated):
CustomAllreduce.__init__ -> create_shared_buffer (cudaMalloc + cudaIpcGetMemHandle through
CudaRTLibrary) for meta and buffer, rank_data = torch.empty(max_size, uint8); peers' buffers
opened lazily (see parallel_state.py); register_graph_buffers after capture."""
import torch
from simcomm import CustomAllreduceBase
from simtruth import truth


class CustomAllreduce(CustomAllreduceBase):
    _SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]
    _MAX_CAR_SIZE = 8192 * 1024

    def __init__(self, group, device, max_size=_MAX_CAR_SIZE):
        with truth.category("ipc"):
            self.init_ca(device, max_size, lazy_open=True)
            self.meta_ptrs = self.create_shared_buffer(self.META_SIZE + max_size, group=group)
            self.buffer_ptrs = self.create_shared_buffer(max_size, group=group)
            self.rank_data = torch.empty(max_size, dtype=torch.uint8, device=self.device)

    def create_shared_buffer(self, size_in_bytes, group=None):
        return self.share(size_in_bytes)

    def register_graph_buffers(self):
        handles = self.graph_buffer_handles()
        self.open_graph_buffers(handles)

    def custom_all_reduce(self, input):
        """out = torch.empty_like(inp) on the way: an activation, not an IPC buffer."""
        return super().custom_all_reduce(input)
