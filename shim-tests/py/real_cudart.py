"""Real third-party code: NVIDIA's libcudart.so.12 (12.9.79, from the nvidia-cuda-runtime-cu12
wheel) loaded with ctypes by path, as SGLang's CudaRTLibrary loads it, on the fake driver.

The real runtime resolves the driver exactly as culedger must survive it: dlopen
libcuda.so.1, dlsym cuGetProcAddress_v2, a probe, ~420 entries by base name and version.
It then asks cuGetExportTable for its private tables, which the fake driver implements, and
runs: a malloc, a memory query and a free. Under culedger the program must see exactly the
same results. Usage: real_cudart.py PATH_TO_LIBCUDART
"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
for name in ("cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaGetDeviceCount", "cudaMalloc",
             "cudaMemGetInfo", "cudaFree"):
    getattr(lib, name).restype = ctypes.c_int

drv, rtv, count = ctypes.c_int(-1), ctypes.c_int(-1), ctypes.c_int(-1)
rc_drv = lib.cudaDriverGetVersion(ctypes.byref(drv))
rc_rt = lib.cudaRuntimeGetVersion(ctypes.byref(rtv))
rc_count = lib.cudaGetDeviceCount(ctypes.byref(count))
p = ctypes.c_void_p()
rc_malloc = lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20))
free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
rc_info = lib.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
rc_free = lib.cudaFree(p)
print(f"RESULT driver_rc={rc_drv} driver={drv.value} runtime_rc={rc_rt} runtime={rtv.value} "
      f"count_rc={rc_count} count={count.value} malloc_rc={rc_malloc} info_rc={rc_info} free_rc={rc_free} "
      f"free={free.value}",
      flush=True)
