"""Self-test of check 4: a 64 MiB buffer exported with cudaIpcGetMemHandle and opened by a second
process started with multiprocessing's spawn (as torch.multiprocessing shares CUDA tensors)."""
import ctypes
import multiprocessing as mp
import os
import sys

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from common import finish, kit  # noqa: E402

NBYTES = 64 << 20


def consume(handle, answer):
    import simcuda as cu

    cu.check(cu.rt.cudaSetDevice(0), "cudaSetDevice")
    p = ctypes.c_void_p()
    h = cu.IpcHandle.from_buffer_copy(handle)
    cu.check(cu.rt.cudaIpcOpenMemHandle(ctypes.byref(p), h, 1), "cudaIpcOpenMemHandle")
    cu.check(cu.rt.cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle")
    answer.put(os.getpid())


def main():
    import simcuda as cu

    mp.set_start_method("spawn", force=True)
    cu.check(cu.rt.cudaSetDevice(0), "cudaSetDevice")
    t = cu.malloc(NBYTES)
    handle = cu.IpcHandle()
    cu.check(cu.rt.cudaIpcGetMemHandle(ctypes.byref(handle), t), "cudaIpcGetMemHandle")
    answer = mp.Queue()
    child = mp.Process(target=consume, args=(bytes(handle), answer))
    child.start()
    child_pid = answer.get(timeout=60)
    child.join(60)
    kit(pid=os.getpid(), child_pid=child_pid, device=0, bytes=NBYTES, sum=1.0, child_exit=child.exitcode)
    finish()


if __name__ == "__main__":
    main()
