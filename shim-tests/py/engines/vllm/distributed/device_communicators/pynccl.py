"""vllm/distributed/device_communicators/pynccl.py (simulated)."""
from simcomm import PyNcclCommunicatorBase

from vllm.distributed.device_communicators.pynccl_wrapper import NCCLLibrary


class PyNcclCommunicator(PyNcclCommunicatorBase):
    def __init__(self, group, device, library_path=None):
        self.init_comm(NCCLLibrary, device)
