"""One process of a multi-GPU layout, on the simulated driver through ctypes: allocates MIB on
its device ORDINAL (default 0; whatever CUDA_VISIBLE_DEVICES makes that; `all`: on each device
it sees), asks cuMemGetInfo once, then (with
`module`) loads a module after that query, whose hidden cost (FAKECUDA_MODULE_MIB) the query
never saw, and stays SECONDS (below 0: until its stdin closes) before it exits without freeing. With FAIL_MIB, it then asks
for FAIL_MIB more on the last of its devices, which must fail (out of memory), and carries on.
Usage: devices.py MIB none|module SECONDS [ORDINAL [FAIL_MIB]]. Prints RESULT lines.
"""
import ctypes
import sys
import time

MIB = 1 << 20


def main():
    mib, after, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    which = sys.argv[4] if len(sys.argv) > 4 else "0"
    fail_mib = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    cu = ctypes.CDLL("libcuda.so.1")

    def ok(r, what):
        if r != 0:
            sys.exit(f"devices.py: {what} -> {r}")

    ok(cu.cuInit(0), "cuInit")
    count = ctypes.c_int()
    ok(cu.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    ordinals = range(count.value) if which == "all" else [int(which)]
    for ordinal in ordinals:
        dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
        ok(cu.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        ok(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib * MIB)), "cuMemAlloc_v2")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
    if after == "module":
        image = ctypes.create_string_buffer(b"\x7fELF not parsed by the simulated driver", 64)
        module = ctypes.c_void_p()
        ok(cu.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
    if fail_mib:
        more = ctypes.c_uint64()
        r = cu.cuMemAlloc_v2(ctypes.byref(more), ctypes.c_size_t(fail_mib * MIB))
        if r != 2:  # CUDA_ERROR_OUT_OF_MEMORY
            sys.exit(f"devices.py: cuMemAlloc_v2 of {fail_mib} MiB -> {r}, not out of memory")
    print(f"RESULT ptr={ptr.value} free={free.value} total={total.value}", flush=True)
    if seconds < 0:
        sys.stdin.read()
    else:
        time.sleep(seconds)
    print("RESULT done=1", flush=True)


if __name__ == "__main__":
    main()
