"""vllm/distributed/device_communicators/cuda_communicator.py (simulated)."""
from simtruth import truth


class CudaCommunicator:
    def __init__(self, device, use_custom_allreduce):
        from vllm.distributed.device_communicators.custom_all_reduce import CustomAllreduce
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        with truth.category("comm"):
            self.pynccl_comm = PyNcclCommunicator(group=None, device=device)
        self.ca_comm = None
        if use_custom_allreduce:
            with truth.category("ipc"):
                self.ca_comm = CustomAllreduce(group=None, device=device)

    def all_reduce(self, input_):
        if self.ca_comm is not None:
            return self.ca_comm.custom_all_reduce(input_)
        return self.pynccl_comm.all_reduce(input_)
