"""Allocates from named functions of the package `simpkg` (runtime and driver, main thread and a
Python thread, through a C extension when one is given) and prints what Python itself says the
stack was at each allocation, for tests/call_sites.rs to compare with culedger's report.

Output: one `SITE <json>` line per allocation: {"ptr", "path", "rc", "want": [[file, function,
line], ...] innermost first, "tb": traceback.extract_stack() as [[file, name, line], ...]
outermost first}, and `RESULT` lines.
Usage: run_sites.py [--ext DIR] (DIR holds the built `simext` extension)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MIB = 1 << 20


def log(ptr, path, rc, want, tb):
    print("SITE " + json.dumps({"ptr": ptr, "path": path, "rc": rc, "want": want,
                                "tb": [[f.filename, f.name, f.lineno] for f in tb]}), flush=True)


def with_extension(ext_dir):
    sys.path.insert(0, ext_dir)
    import simext
    from simpkg import cuda

    def through_c():
        # Python -> C extension -> this Python function (a C-stack shim frame in 3.12+).
        def callback():
            ptr, want = simext.alloc_nogil(5 * MIB), cuda.here()
            log(ptr, "extension", 0, want, [])
        simext.call(callback)

    through_c()
    # A thread created by C, without a Python thread state: native frames only.
    print("RESULT c_thread_ptr=%d" % simext.c_thread_alloc(6 * MIB), flush=True)


def main():
    from simpkg import cuda
    from simpkg.kv import KVPool
    from simpkg.model import Model
    print("RESULT gil_released=%d" % cuda.gil_released_in_ctypes_calls(), flush=True)
    Model().load_weights(2 * MIB, log)
    KVPool()._create_buffers(3 * MIB, log)
    KVPool().in_thread(4 * MIB, log)
    if len(sys.argv) > 2 and sys.argv[1] == "--ext":
        with_extension(sys.argv[2])
    print("RESULT done=1", flush=True)


if __name__ == "__main__":
    main()
