"""A stand-in for the `setproctitle` package (sim-only module), which SGLang and vLLM use to
name their worker processes (sglang/srt/managers/scheduler.py: run_scheduler_process calls
``setproctitle.setproctitle(f"sglang::scheduler{prefix}")``; vllm/utils: set_process_title).

On Linux the real package overwrites the process's argument area with the title and NUL
padding, so that /proc/self/cmdline (and ps) show the title; this does the same. The area's
bounds come from /proc/self/stat (arg_start, arg_end: fields 48 and 49); Python keeps its own
copy of argv, so sys.argv is unchanged."""
import ctypes

_title = None


def setproctitle(title):
    global _title
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    arg_start, arg_end = int(fields[45]), int(fields[46])
    data = title.encode()[: arg_end - arg_start - 1]
    ctypes.memmove(arg_start, data + b"\0" * (arg_end - arg_start - len(data)), arg_end - arg_start)
    _title = title


def getproctitle():
    return _title
