"""vllm/distributed/device_communicators/pynccl_wrapper.py (simulated)."""
from simcomm import NCCLLibraryBase


class NCCLLibrary(NCCLLibraryBase):
    def ncclCommInitRank(self, world_size, unique_id, rank):
        return super().ncclCommInitRank(world_size, unique_id, rank)
