"""ctypes access to the simulated CUDA stack (shim-tests: fake libcudart.so.12 and libcuda.so.1,
found through LD_LIBRARY_PATH), for the self-test's torch-like workloads."""
import ctypes

rt = ctypes.CDLL("libcudart.so.12")
drv = ctypes.CDLL("libcuda.so.1")
for f in ("cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync", "cudaMemGetInfo", "cudaSetDevice",
          "cudaStreamCreate", "cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate",
          "cudaGraphLaunch", "cudaStreamSynchronize", "cudaMemcpy", "cudaHostAlloc", "cudaFreeHost",
          "cudaIpcGetMemHandle", "cudaIpcOpenMemHandle", "cudaIpcCloseMemHandle", "cudaThreadExchangeStreamCaptureMode",
          "cudaDeviceSynchronize"):
    getattr(rt, f).restype = ctypes.c_int
for f in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemCreate",
          "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess", "cuMemGetAllocationGranularity"):
    getattr(drv, f).restype = ctypes.c_int
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
rt.cudaMallocAsync.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_void_p]
rt.cudaFreeAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
rt.cudaHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
rt.cudaGraphInstantiate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_ulonglong]
rt.cudaGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
rt.cudaStreamBeginCapture.argtypes = [ctypes.c_void_p, ctypes.c_int]
rt.cudaStreamEndCapture.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]


class IpcHandle(ctypes.Structure):
    """cudaIpcMemHandle_t: 64 opaque bytes, passed by value."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


rt.cudaIpcGetMemHandle.argtypes = [ctypes.POINTER(IpcHandle), ctypes.c_void_p]
rt.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), IpcHandle, ctypes.c_uint]
rt.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
drv.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
drv.cuMemCreate.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_ulonglong]
drv.cuMemAddressReserve.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64,
                                    ctypes.c_ulonglong]
drv.cuMemMap.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_ulonglong]
drv.cuMemSetAccess.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]

MiB = 1 << 20
HOST_TO_DEVICE = 1
CAPTURE_RELAXED = 2


def check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} failed with {rc}")


def malloc(n):
    p = ctypes.c_void_p()
    check(rt.cudaMalloc(ctypes.byref(p), n), f"cudaMalloc({n})")
    return p.value


def free(p):
    check(rt.cudaFree(p), "cudaFree")


def mem_get_info():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    check(rt.cudaMemGetInfo(ctypes.byref(f), ctypes.byref(t)), "cudaMemGetInfo")
    return f.value, t.value


def upload(ptr, nbytes):
    """Fill device memory from host memory, as a weight loader does."""
    buf = ctypes.create_string_buffer(min(nbytes, 1 << 20))
    done = 0
    while done < nbytes:
        n = min(len(buf), nbytes - done)
        check(rt.cudaMemcpy(ptr + done, buf, n, HOST_TO_DEVICE), "cudaMemcpy")
        done += n


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocProp(ctypes.Structure):
    """CUmemAllocationProp (allocFlags flattened)."""
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", MemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", MemLocation), ("flags", ctypes.c_int)]


def driver_context(dev=0):
    """cuInit and the device's primary context made current (what a runtime does first)."""
    check(drv.cuInit(0), "cuInit")
    d, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(drv.cuDeviceGet(ctypes.byref(d), dev), "cuDeviceGet")
    check(drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), d), "cuDevicePrimaryCtxRetain")
    check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
