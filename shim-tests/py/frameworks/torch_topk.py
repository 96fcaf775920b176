"""Real PyTorch's torch.topk on the simulated driver, as vLLM 0.33's sampler runs it in its
profile run (vllm/v1/worker/gpu/sample/logprob.py compute_topk_scores): torch sizes the
kernel's grid from the device's SM count, registers per SM and blocks per SM
(ATen/native/cuda/TensorTopK.cu get_items_per_thread divides by them), so a driver answering 0
for CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR kills the process with SIGFPE.

Prints RESULT lines: the device properties torch read and the shape of topk's answer.
"""
import torch

p = torch.cuda.get_device_properties(0)
print("RESULT regs_per_sm=%d" % p.regs_per_multiprocessor, flush=True)
print("RESULT sms=%d" % p.multi_processor_count, flush=True)
logits = torch.empty(256, 1024, device="cuda")
top = torch.topk(logits, 5, dim=-1)
torch.cuda.synchronize()
print("RESULT topk=%s" % "x".join(str(d) for d in top.indices.shape), flush=True)
