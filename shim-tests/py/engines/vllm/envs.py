"""vllm/envs.py (simulated): the environment switches the simulation reads, with vLLM 0.33's
defaults."""
import os


def __getattr__(name):
    if name == "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS":
        # vllm 0.33 envs.py: bool(int(os.getenv(..., "1"))), on by default since 0.21.
        return bool(int(os.getenv("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1")))
    raise AttributeError(name)
