"""Real CuPy (14.2, with NVIDIA's libcudart 13.x from the nvidia-cuda-runtime wheel) on the
simulated driver: arrays from CuPy's default memory pool, and what the pool itself says, for
the test to compare with culedger's report.

Usage: cupy_alloc.py OUT.json
"""
import json
import sys

import cupy

MIB = 1 << 20


def make_buffers():
    """Arrays the script keeps: CuPy's pool allocates each from the driver (rounded to 512 B)."""
    return [cupy.empty(n * MIB, dtype=cupy.uint8) for n in (96, 32, 5)]


def scratch():
    """A temporary: back in CuPy's pool when it goes, not given back to the driver."""
    t = cupy.empty(40 * MIB, dtype=cupy.uint8)
    del t


def main():
    pool = cupy.get_default_memory_pool()
    keep = make_buffers()
    scratch()
    figures = {
        "cupy": cupy.__version__,
        "runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "total_bytes": pool.total_bytes(),
        "used_bytes": pool.used_bytes(),
        "arrays": [{"ptr": a.data.ptr, "nbytes": a.nbytes} for a in keep],
    }
    with open(sys.argv[1], "w") as f:
        json.dump(figures, f)
    print(f"RESULT total={figures['total_bytes']} used={figures['used_bytes']}", flush=True)


if __name__ == "__main__":
    main()
