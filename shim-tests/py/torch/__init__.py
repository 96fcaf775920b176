"""The simulated PyTorch CUDA layer of the demo (sglang_sim.py): the runtime loaded through
ctypes the way SGLang's CudaRTLibrary does (``libcudart.so.12`` by name, then the mapped file
found in /proc/self/maps opened again), with checked calls.

It lives in a directory named ``torch`` on purpose: culedger's short ``caller`` skips frames of
the interpreter's and PyTorch's own files (paths with ``/torch/``), so an allocation is
attributed to the engine function that asked for the memory, as it would be under real PyTorch.
Python standard library only; it shadows a real ``torch`` only for the scripts of this
directory."""
import ctypes
import os

cudaMemcpyHostToDevice = 1
cudaErrorMemoryAllocation = 2


class cudaIpcMemHandle_t(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 64)]


class CudaError(RuntimeError):
    def __init__(self, call, code, text):
        super().__init__(f"{call}: CUDA error {code}: {text}")
        self.code = code


_P = ctypes.POINTER
_VP = ctypes.c_void_p
_SZ = ctypes.c_size_t
# name -> argtypes (all return cudaError_t except cudaGetErrorString).
SIGNATURES = {
    "cudaSetDevice": [ctypes.c_int],
    "cudaGetDeviceCount": [_P(ctypes.c_int)],
    "cudaMalloc": [_P(_VP), _SZ],
    "cudaFree": [_VP],
    "cudaMemcpy": [_VP, _VP, _SZ, ctypes.c_int],
    "cudaMemGetInfo": [_P(_SZ), _P(_SZ)],
    "cudaIpcGetMemHandle": [_P(cudaIpcMemHandle_t), _VP],
    "cudaIpcOpenMemHandle": [_P(_VP), cudaIpcMemHandle_t, ctypes.c_uint],
    "cudaIpcCloseMemHandle": [_VP],
    "cudaDeviceEnablePeerAccess": [ctypes.c_int, ctypes.c_uint],
    "cudaStreamCreate": [_P(_VP)],
    "cudaStreamDestroy": [_VP],
    "cudaStreamBeginCapture": [_VP, ctypes.c_int],
    "cudaStreamEndCapture": [_VP, _P(_VP)],
    "cudaMallocAsync": [_P(_VP), _SZ, _VP],
    "cudaGraphInstantiate": [_P(_VP), _VP, ctypes.c_ulonglong],
    "cudaGraphExecDestroy": [_VP],
    "cudaGraphDestroy": [_VP],
    "cudaDeviceSynchronize": [],
}


def find_loaded_library(prefix):
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith(prefix):
                return path
    return None


class CudaRT:
    """The subset of the runtime the simulation calls, each call checked."""

    def __init__(self):
        ctypes.CDLL("libcudart.so.12")
        path = find_loaded_library("libcudart")
        if path is None:
            raise RuntimeError("libcudart is not loaded in this process")
        self.lib = ctypes.CDLL(path)
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p
        self.lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        for name, argtypes in SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes

    def call(self, name, *args):
        code = getattr(self.lib, name)(*args)
        if code != 0:
            raise CudaError(name, code, self.lib.cudaGetErrorString(code).decode())

    def malloc(self, size):
        p = _VP()
        self.call("cudaMalloc", ctypes.byref(p), size)
        return p

    def malloc_async(self, size, stream):
        p = _VP()
        self.call("cudaMallocAsync", ctypes.byref(p), size, stream)
        return p

    def mem_get_info(self):
        free, total = _SZ(), _SZ()
        self.call("cudaMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value
