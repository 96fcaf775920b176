#!/usr/bin/env python3
"""Explicit tags on the simulated stack: allocations through ctypes libcudart and the driver's
VMM, inside ``culedger.tag(...)`` blocks (nested, on another thread, around an export), and the
same calls without culedger (the tags are then no-ops). RESULT keys: ``active`` (culedger's tag
functions were found), ``done=1``."""
import ctypes
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import culedger  # noqa: E402

MIB = 1 << 20
_VP = ctypes.c_void_p

rt = ctypes.CDLL("libcudart.so.12")
rt.cudaMalloc.argtypes = [ctypes.POINTER(_VP), ctypes.c_size_t]
rt.cudaSetDevice.argtypes = [ctypes.c_int]
rt.cudaIpcGetMemHandle.argtypes = [_VP, _VP]
drv = ctypes.CDLL("libcuda.so.1")


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", _VP), ("allocFlags", AllocFlags)]


def malloc(n):
    p = _VP()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    return p


def vmm(n):
    prop = Prop(type=1, location=Location(type=1, id=0))  # pinned, on device 0
    h = ctypes.c_ulonglong()
    assert drv.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(n), ctypes.byref(prop), ctypes.c_ulonglong(0)) == 0
    return h


def main():
    assert rt.cudaSetDevice(0) == 0
    malloc(8 * MIB)  # untagged: other
    with culedger.tag("kv_pool"):
        malloc(16 * MIB)
        with culedger.tag("weights"):
            malloc(2 * MIB)  # innermost wins
        malloc(4 * MIB)  # back to kv_pool
    with culedger.tag("my_lora"):  # a category of the program's own
        malloc(6 * MIB)
    with culedger.tag("weights"):
        exported = malloc(10 * MIB)
        handle = ctypes.create_string_buffer(64)
        assert rt.cudaIpcGetMemHandle(handle, exported) == 0  # the tag wins over the export rule
    with culedger.tag("comm"):
        vmm(4 * MIB)

    def worker():
        with culedger.tag("graphs"):
            malloc(12 * MIB)
        malloc(14 * MIB)  # this thread's tag is over: other

    with culedger.tag("kv_pool"):  # tags are per thread: the worker does not see this one
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    print(f"RESULT active={int(culedger._tags.active())} done=1", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
