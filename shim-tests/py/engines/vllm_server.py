#!/usr/bin/env python3
"""The vLLM-like engine start-up of the simulated engines: ``python3 vllm_server.py --tp 2
[--allreduce nccl|custom] [--enable-sleep-mode] --model-mib M --gpu-memory-utilization U
[--truth-dir D]`` (the arguments of vllm/config.py). Exit status 0 when every worker is ready."""
import sys

from vllm.config import parse_args
from vllm.v1.executor.multiproc_executor import MultiprocExecutor

if __name__ == "__main__":
    sys.exit(MultiprocExecutor(parse_args(sys.argv[1:])).run())
