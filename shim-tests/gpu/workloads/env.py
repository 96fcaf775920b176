"""What the kit ran on: GPU, driver, CUDA, PyTorch, the libcudart PyTorch loaded, Python, CuPy, JAX."""
import os
import platform
import re
import subprocess

from common import finish, kit

info = {"pid": os.getpid(), "python": platform.python_version(), "machine": platform.machine()}
try:
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    info["gpu"], info["driver"], info["gpu_memory"] = [x.strip() for x in q.split(",")]
    head = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"CUDA Version:\s*([0-9.]+)", head)
    if m:
        info["driver_cuda"] = m.group(1)
except (OSError, IndexError, ValueError, subprocess.SubprocessError) as e:
    info["nvidia_smi"] = f"unavailable: {e}"
try:
    import torch

    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        torch.cuda.init()
        info["device_name"] = torch.cuda.get_device_name(0)
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "libcudart.so" in line or "libcuda.so" in line})
        info["cuda_libraries"] = libs
except Exception as e:  # report, do not fail: the checks say what is missing
    info["torch"] = f"unavailable: {e}"
for mod in ("cupy", "jax"):
    try:
        info[mod] = __import__(mod).__version__
    except Exception:
        info[mod] = None
kit(**info)
finish()
