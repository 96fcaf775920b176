"""Shared by the kit's workloads: the KIT line protocol (see ../kit.py)."""
import json
import os
import sys


def kit(**fields):
    """One `KIT {json}` line: the workload's own figures (its ground truth)."""
    print("KIT " + json.dumps(fields), flush=True)


def skip(reason):
    """The framework is not installed here: the check is skipped (exit status 3)."""
    print(f"SKIP {reason}", flush=True)
    sys.exit(3)


def wait_for_kit():
    """Hold everything while the kit looks from outside (nvidia-smi), until it says go."""
    print("KIT-READY", flush=True)
    sys.stdin.readline()


def finish():
    """Exit at once, without interpreter teardown: nothing is freed after the figures were
    taken (culedger writes its final report from `_exit`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
