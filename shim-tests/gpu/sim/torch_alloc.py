"""Self-test of check 1: a torch-like caching allocator over the simulated runtime, with the same
request sequence as ../workloads/torch_alloc.py (smaller sizes). Modes as PyTorch's backends:
native (cudaMalloc segments: requests up to 1 MiB from 2 MiB segments, up to 10 MiB from 20 MiB
segments, larger ones rounded to 2 MiB; freed blocks are kept), expandable (one reserved virtual
range mapped with cuMemCreate + cuMemMap as it grows: 20 MiB pages, 2 MiB for small requests) and
async (cudaMallocAsync / cudaFreeAsync per request). It prints what PyTorch's memory_reserved()
and memory_allocated() would. KIT_SABOTAGE=1 misreports `reserved` by 512 bytes (the kit's
self-test uses it to see the comparison fail)."""
import argparse
import ctypes
import os
import random
import sys

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from common import finish, kit  # noqa: E402

import simcuda as cu  # noqa: E402

MiB = cu.MiB


def round_up(n, to):
    return (n + to - 1) // to * to


class Pool:
    """Segments with first-fit free ranges; memory is never given back (a cache)."""

    def __init__(self, new_segment):
        self.new_segment = new_segment
        self.free = []  # [start, size]
        self.reserved = 0

    def alloc(self, size, segment_size):
        for r in self.free:
            if r[1] >= size:
                p = r[0]
                r[0] += size
                r[1] -= size
                return p
        base = self.new_segment(segment_size)
        self.reserved += segment_size
        if segment_size > size:
            self.free.append([base + size, segment_size - size])
        return base

    def release(self, p, size):
        self.free.append([p, size])


class Native:
    def __init__(self):
        self.small, self.large = Pool(cu.malloc), Pool(cu.malloc)

    def alloc(self, n):
        size = round_up(max(n, 1), 512)
        if size <= MiB:
            return self.small.alloc(size, 2 * MiB), size
        if size <= 10 * MiB:
            return self.large.alloc(size, 20 * MiB), size
        size = round_up(size, 2 * MiB)
        return self.large.alloc(size, size), size

    def free(self, p, size):
        (self.small if size <= MiB else self.large).release(p, size)

    def reserved(self):
        return self.small.reserved + self.large.reserved


class Expandable:
    """One virtual range per pool, backed page by page."""

    SPAN = 8 << 30

    def __init__(self, dev):
        cu.driver_context(dev)
        self.dev = dev
        self.pools = {}
        for name, page in (("small", 2 * MiB), ("large", 20 * MiB)):
            va = ctypes.c_uint64()
            cu.check(cu.drv.cuMemAddressReserve(ctypes.byref(va), self.SPAN, 0, 0, 0), "cuMemAddressReserve")
            self.pools[name] = {"va": va.value, "page": page, "mapped": 0, "top": 0, "free": []}

    def grow(self, pool, upto):
        prop = cu.AllocProp()
        prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = 1  # CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = self.dev
        while pool["mapped"] < upto:
            h = ctypes.c_uint64()
            cu.check(cu.drv.cuMemCreate(ctypes.byref(h), pool["page"], ctypes.byref(prop), 0), "cuMemCreate")
            cu.check(cu.drv.cuMemMap(pool["va"] + pool["mapped"], pool["page"], 0, h, 0), "cuMemMap")
            access = cu.AccessDesc(prop.location, 3)  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            cu.check(cu.drv.cuMemSetAccess(pool["va"] + pool["mapped"], pool["page"], ctypes.byref(access), 1),
                     "cuMemSetAccess")
            pool["mapped"] += pool["page"]

    def alloc(self, n):
        size = round_up(max(n, 1), 512)
        pool = self.pools["small" if size <= MiB else "large"]
        for r in pool["free"]:
            if r[1] >= size:
                p = r[0]
                r[0] += size
                r[1] -= size
                return p, size
        p = pool["va"] + pool["top"]
        pool["top"] += size
        self.grow(pool, pool["top"])
        return p, size

    def free(self, p, size):
        self.pools["small" if size <= MiB else "large"]["free"].append([p, size])

    def reserved(self):
        return sum(p["mapped"] for p in self.pools.values())


class Async:
    def __init__(self):
        self.live = 0

    def alloc(self, n):
        p = ctypes.c_void_p()
        cu.check(cu.rt.cudaMallocAsync(ctypes.byref(p), n, None), f"cudaMallocAsync({n})")
        self.live += n
        return p.value, n

    def free(self, p, size):
        cu.check(cu.rt.cudaFreeAsync(p, None), "cudaFreeAsync")
        self.live -= size

    def reserved(self):
        return self.live


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True)
    ap.add_argument("--count", type=int, default=300)
    args = ap.parse_args()
    dev = 0
    cu.check(cu.rt.cudaSetDevice(dev), "cudaSetDevice")
    alloc = {"native": Native, "async": Async}.get(args.mode, lambda: Expandable(dev))()
    rng = random.Random(20261130)
    keep, allocated = [], 0
    for i in range(args.count):
        p, size = alloc.alloc(int(2 ** rng.uniform(9, 26)))
        keep.append((p, size))
        allocated += size
        if i % 3 == 2:
            p, size = keep.pop(rng.randrange(len(keep)))
            alloc.free(p, size)
            allocated -= size
    reserved = alloc.reserved() + (512 if os.environ.get("KIT_SABOTAGE") else 0)
    kit(pid=os.getpid(), device=dev, mode=args.mode, conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        reserved=reserved, allocated=allocated, tensors=len(keep), backend="simulated")
    finish()


if __name__ == "__main__":
    main()
