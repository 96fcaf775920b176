import ctypes
import traceback

from . import cuda


class Model:
    def load_weights(self, size, log):
        p = ctypes.c_void_p()
        rc, want, tb = cuda.rt.cudaMalloc(ctypes.byref(p), size), cuda.here(), traceback.extract_stack()
        log(p.value, "runtime", rc, want, tb)
        return p.value
