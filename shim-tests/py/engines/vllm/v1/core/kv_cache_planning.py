"""vllm/v1/core/kv_cache_planning.py (simulated): the engine core's check of each worker's
available KV cache memory before any KV cache is allocated, as vllm 0.33 makes it
(get_kv_cache_configs -> _check_enough_kv_cache_memory): the null block BlockPool holds back is
taken off first; nothing left is "No available memory for the cache blocks"; less than one
request of max_model_len tokens needs is refused with vLLM's estimate of the longest that fits
(_estimate_max_model_len_from_groups: a binary search over 1..max_model_len). One group of
full-attention layers: a block is every layer's page (_get_kv_cache_bytes_per_block), a
request of n tokens cdiv(n, block_size) blocks (FullAttentionSpec.max_memory_usage_bytes)."""


def cdiv(a, b):
    return -(-a // b)


def _check_enough_kv_cache_memory(available_memory, get_needed_memory, max_model_len, estimate_max_model_len):
    if available_memory <= 0:
        raise ValueError("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                         "when initializing the engine.")
    needed_memory = get_needed_memory()
    if needed_memory > available_memory:
        estimated_max_len = estimate_max_model_len(available_memory)
        estimated_msg = ""
        if estimated_max_len > 0:
            estimated_msg = ("Based on the available memory, "
                             f"the estimated maximum model length is {estimated_max_len}. ")
        raise ValueError(f"To serve at least one request with the model's max seq len ({max_model_len}), "
                         f"({needed_memory / 2**30:.2f} GiB KV cache is needed, which is larger than the available "
                         f"KV cache memory ({available_memory / 2**30:.2f} GiB). {estimated_msg}Try increasing "
                         "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")


def check_kv_cache_configs(vllm_config, bytes_per_block, available_memory):
    """Each worker's available memory (`available_memory`, a list) checked as
    get_kv_cache_configs checks it."""
    block_size, max_model_len = vllm_config.block_size, vllm_config.resolved_max_model_len()

    def needed(model_len):
        return cdiv(model_len, block_size) * bytes_per_block

    def estimate(available):
        left, right = 1, max_model_len
        if needed(left) > available:
            return 0
        result = 1
        while left <= right:
            mid = (left + right) // 2
            if needed(mid) <= available:
                result, left = mid, mid + 1
            else:
                right = mid - 1
        return result

    for avail in available_memory:
        _check_enough_kv_cache_memory(avail - bytes_per_block, lambda: needed(max_model_len), max_model_len,
                                      estimate)
