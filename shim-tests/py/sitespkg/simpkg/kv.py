import ctypes
import threading
import traceback

from . import cuda


class KVPool:
    def _create_buffers(self, size, log):
        p = ctypes.c_uint64()
        rc, want, tb = cuda.drv.cuMemAlloc_v2(ctypes.byref(p), size), cuda.here(), traceback.extract_stack()
        log(p.value, "driver", rc, want, tb)

    def _thread_body(self, size, log):
        # A fresh thread has no current context: the runtime makes the primary one current.
        cuda.rt.cudaSetDevice(0)
        self._create_buffers(size, log)

    def in_thread(self, size, log):
        t = threading.Thread(target=self._thread_body, args=(size, log), name="kv-alloc")
        t.start()
        t.join()
