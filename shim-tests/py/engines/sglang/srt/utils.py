"""sglang/srt/utils.py (simulated): get_available_gpu_memory as SGLang has it: empty the cache,
ask the driver, and with ``distributed`` take the minimum over the ranks with an all-reduce of a
small device tensor."""
import torch


def get_available_gpu_memory(device, gpu_id, distributed=False, empty_cache=True):
    if empty_cache:
        torch.cuda.empty_cache()
    free_gpu_memory, _ = torch.cuda.mem_get_info(gpu_id)
    if distributed:
        from sglang.srt.distributed import tensor_model_parallel_all_reduce_min
        tensor = torch.tensor([float(free_gpu_memory)] * 4, dtype=torch.float32).to(torch.device(device, gpu_id))
        free_gpu_memory = tensor_model_parallel_all_reduce_min(tensor).item()
    return free_gpu_memory / (1 << 30)
