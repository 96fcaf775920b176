"""sglang/srt/distributed/device_communicators/pynccl.py (simulated): PyNcclCommunicator.__init__
-> NCCLLibrary.ncclCommInitRank (buffers from inside libnccl.so.2), then a warm-up all-reduce of
torch.zeros(1)."""
from simcomm import PyNcclCommunicatorBase
from simtruth import truth

from sglang.srt.distributed.device_communicators.pynccl_wrapper import NCCLLibrary


class PyNcclCommunicator(PyNcclCommunicatorBase):
    def __init__(self, group, device, library_path=None):
        with truth.category("comm"):
            self.init_comm(NCCLLibrary, device)
