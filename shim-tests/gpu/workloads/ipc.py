"""Check 4: a CUDA tensor shared with a second process through torch.multiprocessing (CUDA IPC:
the exporter calls cudaIpcGetMemHandle on the tensor's allocation, the consumer opens it)."""
import os

from common import finish, kit

NBYTES = 64 << 20


def consume(queue, answer):
    import torch

    t = queue.get()  # opens the exporter's memory (cudaIpcOpenMemHandle)
    total = float(t.sum().item())
    del t
    torch.cuda.synchronize()
    answer.put((os.getpid(), total))


def main():
    import torch
    import torch.multiprocessing as mp

    mp.set_start_method("spawn", force=True)
    dev = torch.cuda.current_device()
    t = torch.full((NBYTES // 4,), 1.0, dtype=torch.float32, device=f"cuda:{dev}")
    torch.cuda.synchronize(dev)
    queue, answer = mp.Queue(), mp.Queue()
    child = mp.Process(target=consume, args=(queue, answer))
    child.start()
    queue.put(t)
    child_pid, total = answer.get(timeout=120)
    child.join(120)
    kit(pid=os.getpid(), child_pid=child_pid, device=dev, bytes=t.numel() * t.element_size(), sum=total,
        child_exit=child.exitcode)
    finish()


if __name__ == "__main__":
    main()
