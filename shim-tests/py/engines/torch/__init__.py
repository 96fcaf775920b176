"""A small stand-in for PyTorch, for the simulated engines (shim-tests/py/engines).

Module paths and the Python functions that matter for attribution follow PyTorch's:
``torch/nn/modules/module.py`` (``Module.to``, ``Module._apply``, ``Module.load_state_dict``),
``torch/cuda/graphs.py`` (``CUDAGraph``, ``graph``), ``torch/cuda/memory.py`` (``empty_cache``,
``mem_get_info``, ``MemPool``, ``use_mem_pool``, ``CUDAPluggableAllocator``). Device tensors
are blocks of a caching allocator with PyTorch's rules (libc10_cuda.so, see
shim-tests/native/c10_cuda_sim.c); nothing is computed."""
from ._cuda_runtime import OutOfMemoryError
from ._tensor import (Tensor, arange, bfloat16, bool, device, dtype, empty, empty_like, float, float8_e4m3fn,
                      float16, float32, full, get_default_dtype, half, int, int8, int32, int64, long, ones,
                      set_default_dtype, tensor, uint8, zeros, zeros_like)
from . import cuda, distributed, nn  # noqa: E402


class _NoGrad:
    """`torch.inference_mode()` / `torch.no_grad()`: context manager and decorator, no effect."""

    def __call__(self, fn=None):
        if fn is None:
            return self
        return fn

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def inference_mode(mode=True):
    return _NoGrad()


def no_grad():
    return _NoGrad()
