#!/usr/bin/env python3
"""The SGLang-like server start-up of the simulated engines: ``python3 sglang_server.py --tp 2
--allreduce nccl|custom --model-mib M --mem-fraction-static F [--truth-dir D]`` (the arguments of
sglang/srt/server_args.py). Runs sglang.launch_server from the simulated package tree next to
this file. Exit status 0 when every rank started, 1 when one failed (out of memory)."""
import sys

from sglang.launch_server import main

if __name__ == "__main__":
    sys.exit(main())
