"""Self-test: what the kit ran on (the simulated stack)."""
import os
import platform
import sys

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from common import finish, kit  # noqa: E402

kit(pid=os.getpid(), python=platform.python_version(), machine=platform.machine(), gpu="simulated (shim-tests fakecuda)",
    driver=os.environ.get("FAKECUDA_DRIVER_VERSION", "12090"), cuda="fake libcudart.so.12 (12.9 API)", torch=None)
finish()
