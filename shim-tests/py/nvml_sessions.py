"""NVIDIA's real pynvml (nvidia-ml-py, target/nvml/py) over the simulated NVML and driver, as the
engines call it.

- NCCL's session (src/misc/nvmlwrap.cc: nvmlInit_v2 once, then handles by PCI bus id at every
  communicator split) with SGLang's peer check in the middle of it
  (sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py, is_full_nvlink:
  pynvml.nvmlInit(), handles, P2P status, pynvml.nvmlShutdown()): NCCL's handles still work.
- vLLM's platform queries (vllm/platforms/cuda.py: nvmlDeviceGetName unguarded) and the memory
  queries, compared with what the fake driver's cuMemGetInfo tells this process after it
  allocated.
Prints RESULT lines; exits non-zero on the first unexpected answer.
"""
import ctypes
import os
import sys

import pynvml

MIB = 1 << 20


def check(cond, what):
    if not cond:
        sys.exit(f"nvml_sessions: {what}")


def code(fn, *args):
    """NVML's return code of a pynvml call (0 when it succeeds)."""
    try:
        fn(*args)
        return 0
    except pynvml.NVMLError as e:
        return e.value


def sessions():
    # NCCL: the library directly, the unversioned names NCCL resolves with dlsym.
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    check(lib.nvmlInit_v2() == 0, "NCCL's nvmlInit_v2")
    handle = ctypes.c_void_p()
    by_bus = lambda: lib.nvmlDeviceGetHandleByPciBusId_v2(b"0000:02:00.0", ctypes.byref(handle))
    check(by_bus() == 0, "NCCL's handle before the peer check")

    # SGLang's is_full_nvlink, in the same process.
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    status = pynvml.nvmlDeviceGetP2PStatus(handles[0], handles[1], pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
    pynvml.nvmlShutdown()

    after_peer_check = by_bus()
    check(lib.nvmlShutdown() == 0, "NCCL's nvmlShutdown")
    after_last = by_bus()
    extra = lib.nvmlShutdown()
    print(f"RESULT devices={len(handles)} p2p={status} after_peer_check={after_peer_check} "
          f"after_last_shutdown={after_last} extra_shutdown={extra}", flush=True)


def driver():
    """The fake driver: a context and 100 MiB on device 0; cuMemGetInfo's answer."""
    cu = ctypes.CDLL("libcuda.so.1")
    ok = lambda r, what: check(r == 0, f"{what} -> {r}")
    ok(cu.cuInit(0), "cuInit")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    ok(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(100 * MIB)), "cuMemAlloc_v2")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
    name = ctypes.create_string_buffer(96)
    ok(cu.cuDeviceGetName(name, 96, dev), "cuDeviceGetName")
    return free.value, total.value, name.value.decode()


def online_cpus():
    """The host's online CPUs (/sys/devices/system/cpu/online, e.g. "0-3,6")."""
    try:
        ranges = open("/sys/devices/system/cpu/online").read().strip().split(",")
    except OSError:
        return os.cpu_count()
    return sum(int(hi or lo) - int(lo) + 1 for lo, _, hi in (r.partition("-") for r in ranges))


def queries():
    free, total, cu_name = driver()
    pynvml.nvmlInit()
    h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    name = pynvml.nvmlDeviceGetName(h0)
    check(name == cu_name, f"NVML's name {name!r} is the driver's {cu_name!r}")
    m1 = pynvml.nvmlDeviceGetMemoryInfo(h0)
    m2 = pynvml.nvmlDeviceGetMemoryInfo(h0, version=pynvml.nvmlMemory_v2)
    other = pynvml.nvmlDeviceGetMemoryInfo(h1)
    bad = pynvml.c_nvmlMemory_v2_t()
    bad.version = 1
    bad_version = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")(h0, ctypes.byref(bad))
    short = ctypes.create_string_buffer(8)
    short_name = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetName")(h0, short, ctypes.c_uint(8))
    numa = pynvml.nvmlDeviceGetNumaNodeId(h0)
    words = (os.cpu_count() + 63) // 64 + 1
    affinity = pynvml.nvmlDeviceGetCpuAffinity(h0, words)
    socket = pynvml.nvmlDeviceGetCpuAffinityWithinScope(h0, words, pynvml.NVML_AFFINITY_SCOPE_SOCKET)
    bad_scope = code(pynvml.nvmlDeviceGetCpuAffinityWithinScope, h0, words, 7)
    cpus = sum(bin(w).count("1") for w in affinity)
    pynvml.nvmlShutdown()
    print(f"RESULT cu_free={free} cu_total={total} v1_free={m1.free} v1_total={m1.total} v1_used={m1.used} "
          f"v2_free={m2.free} v2_total={m2.total} v2_used={m2.used} v2_reserved={m2.reserved} "
          f"dev1_used={other.used} dev1_total={other.total} bad_version={bad_version} short_name={short_name} "
          f"numa={numa} affinity_cpus={cpus} online_cpus={online_cpus()} same_socket={int(list(socket) == list(affinity))} "
          f"bad_scope={bad_scope}", flush=True)


def identity():
    """Under CUDA_VISIBLE_DEVICES (set by the test): the driver's ordinal 0 and NVML's device of
    the same UUID and PCI bus id; NVML lists this process with the bytes it holds there."""
    free, total, _ = driver()
    cu = ctypes.CDLL("libcuda.so.1")
    raw = (ctypes.c_ubyte * 16)()
    check(cu.cuDeviceGetUuid_v2(raw, 0) == 0, "cuDeviceGetUuid_v2")
    b = bytes(raw).hex()
    cu_uuid = f"GPU-{b[:8]}-{b[8:12]}-{b[12:16]}-{b[16:20]}-{b[20:]}"
    bus = ctypes.create_string_buffer(32)
    check(cu.cuDeviceGetPCIBusId(bus, 32, 0) == 0, "cuDeviceGetPCIBusId")
    pynvml.nvmlInit()
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(cu_uuid)
    by_bus = pynvml.nvmlDeviceGetHandleByPciBusId(bus.value)
    index = pynvml.nvmlDeviceGetIndex(by_uuid)
    same = int(index == pynvml.nvmlDeviceGetIndex(by_bus))
    text = lambda v: v.decode() if isinstance(v, bytes) else v
    nvml_uuid = text(pynvml.nvmlDeviceGetUUID(by_uuid))
    pci = pynvml.nvmlDeviceGetPciInfo(by_uuid)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(by_uuid)
    mine = [p.usedGpuMemory for p in procs if p.pid == os.getpid()]
    others = sum(len(pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i)))
                 for i in range(pynvml.nvmlDeviceGetCount()) if i != index)
    pynvml.nvmlShutdown()
    print(f"RESULT index={index} same_device={same} uuid_match={int(nvml_uuid == cu_uuid)} "
          f"bus_match={int(text(pci.busId).lower() == bus.value.decode().lower())} "
          f"procs={len(procs)} mine={mine[0] if mine else 0} held={total - free} others={others}", flush=True)


if __name__ == "__main__":
    {"sessions": sessions, "queries": queries, "identity": identity}[sys.argv[1]]()
