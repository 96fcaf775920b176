"""PyTorch's own check that initialising CUDA creates no context (test/test_cuda_primary_ctx.py,
TestCudaPrimaryCtx): after torch.cuda.device_count() no device's primary context is active, and
a tensor on cuda:1 activates cuda:1's only. NVIDIA's runtime asks the driver for every device's
primary context while it initialises (CUDART_INTERFACE slot 2): a driver that commits memory
there gives every process a context on every GPU.

Prints RESULT lines: the devices' primary-context states (torch._C._cuda_hasPrimaryContext,
cuDevicePrimaryCtxGetState's `active`) after device_count and after the tensor.
"""
import torch


def states():
    return ",".join(str(int(torch._C._cuda_hasPrimaryContext(d))) for d in range(torch.cuda.device_count()))


n = torch.cuda.device_count()
print("RESULT devices=%d" % n, flush=True)
print("RESULT after_init=%s" % states(), flush=True)
x = torch.randn(1, device="cuda:1")
str(x)
print("RESULT after_tensor=%s" % states(), flush=True)
