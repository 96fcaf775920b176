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


_TAG_FNS = []


def _tag_fns():
    """culedger_push_tag / culedger_pop_tag from the process's global scope (None, None without
    culedger)."""
    if not _TAG_FNS:
        import ctypes
        try:
            lib = ctypes.CDLL(None)
            push, pop = lib.culedger_push_tag, lib.culedger_pop_tag
            push.argtypes, push.restype, pop.argtypes, pop.restype = [ctypes.c_char_p], ctypes.c_int, [], ctypes.c_int
        except (OSError, AttributeError):
            push = pop = None
        _TAG_FNS.append((push, pop))
    return _TAG_FNS[0]


class tag:
    """`with tag("kv_pool"):` culedger's explicit tag for what the block allocates (docs/categories.md,
    "Explicit tags"); a no-op without culedger. For what no rule can know: a pool sized to less than
    half of the free memory its query reported is not recognised by the phase fallback."""

    def __init__(self, name):
        self.name = name.encode()

    def __enter__(self):
        push, _ = _tag_fns()
        if push:
            push(self.name)
        return self

    def __exit__(self, *exc):
        _, pop = _tag_fns()
        if pop:
            pop()
        return False
