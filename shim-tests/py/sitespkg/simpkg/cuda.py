"""The runtime and the driver through ctypes (CDLL: the GIL is released around each call)."""
import ctypes
import sys

_P, _VP, _SZ = ctypes.POINTER, ctypes.c_void_p, ctypes.c_size_t
rt = ctypes.CDLL("libcudart.so.12")
rt.cudaMalloc.argtypes, rt.cudaMalloc.restype = [_P(_VP), _SZ], ctypes.c_int
drv = ctypes.CDLL("libcuda.so.1")
drv.cuMemAlloc_v2.argtypes, drv.cuMemAlloc_v2.restype = [_P(ctypes.c_uint64), _SZ], ctypes.c_int


def here():
    """The caller's frames, innermost first: (file, qualified name, line)."""
    out, f = [], sys._getframe(1)
    while f is not None:
        code = f.f_code
        out.append((code.co_filename, getattr(code, "co_qualname", code.co_name), f.f_lineno))
        f = f.f_back
    return out


def gil_released_in_ctypes_calls():
    """PyGILState_Check called through a CFUNCTYPE pointer (a foreign call like CDLL's) sees no GIL;
    through pythonapi (a PyDLL) it does."""
    check = ctypes.pythonapi.PyGILState_Check
    check.restype = ctypes.c_int
    held_in_pydll = check()
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(check, ctypes.c_void_p).value)
    return held_in_pydll == 1 and fn() == 0
