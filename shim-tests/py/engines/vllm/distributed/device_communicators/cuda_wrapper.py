"""vllm/distributed/device_communicators/cuda_wrapper.py (simulated)."""
from simcomm import CudaRTLibraryBase


class CudaRTLibrary(CudaRTLibraryBase):
    pass
