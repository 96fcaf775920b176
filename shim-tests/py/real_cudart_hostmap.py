"""NVIDIA's real libcudart (loaded by path with ctypes) mapping pinned host memory on the fake
driver, as vLLM's V2 model runner (cudaHostGetDevicePointer on pinned buffers) and NCCL's
shared-memory transport (cudaHostRegister(..., cudaHostRegisterPortable | cudaHostRegisterMapped),
then cudaHostGetDevicePointer) do. Prints the runtime's return codes and whether each device
pointer is the host pointer (unified addressing with CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM).
Usage: real_cudart_hostmap.py PATH_TO_LIBCUDART
"""
import ctypes
import mmap
import sys

lib = ctypes.CDLL(sys.argv[1])
MIB = 1 << 20
cudaHostAllocMapped, cudaHostRegisterPortable, cudaHostRegisterMapped = 2, 1, 2


def device_pointer(host, flags=0):
    d = ctypes.c_void_p()
    rc = lib.cudaHostGetDevicePointer(ctypes.byref(d), ctypes.c_void_p(host), ctypes.c_uint(flags))
    return rc, d.value


def page_aligned(n):
    """Page-aligned pageable memory (an anonymous mapping), and its address."""
    m = mmap.mmap(-1, n)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


results = {}
rc_set = lib.cudaSetDevice(0)
pinned = ctypes.c_void_p()
results["alloc_rc"] = lib.cudaHostAlloc(ctypes.byref(pinned), ctypes.c_size_t(MIB), cudaHostAllocMapped)
rc, d = device_pointer(pinned.value)
results.update(alloc_ptr_rc=rc, alloc_same=int(d == pinned.value))
default = ctypes.c_void_p()
lib.cudaMallocHost(ctypes.byref(default), ctypes.c_size_t(MIB))
rc, d = device_pointer(default.value)
results.update(default_rc=rc, default_same=int(d == default.value))
results["flags_rc"] = device_pointer(pinned.value, 1)[0]

shm, shm_addr = page_aligned(MIB)
results["register_rc"] = lib.cudaHostRegister(ctypes.c_void_p(shm_addr), ctypes.c_size_t(MIB),
                                              cudaHostRegisterPortable | cudaHostRegisterMapped)
rc, d = device_pointer(shm_addr)
results.update(registered_rc=rc, registered_same=int(d == shm_addr))
plain, plain_addr = page_aligned(MIB)
lib.cudaHostRegister(ctypes.c_void_p(plain_addr), ctypes.c_size_t(MIB), 0)
results["unmapped_rc"] = device_pointer(plain_addr)[0]
lib.cudaGetLastError()
other, other_addr = page_aligned(MIB)
results["pageable_rc"] = device_pointer(other_addr)[0]
lib.cudaGetLastError()
results["unregister_rc"] = lib.cudaHostUnregister(ctypes.c_void_p(shm_addr))
lib.cudaHostUnregister(ctypes.c_void_p(plain_addr))
results["free_rc"] = lib.cudaFreeHost(pinned)
lib.cudaFreeHost(default)
print("RESULT set_rc=%d " % rc_set + " ".join(f"{k}={v}" for k, v in results.items()), flush=True)
