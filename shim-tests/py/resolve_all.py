"""Resolve driver entry points by base name, the way a runtime does, and say what came back.

Usage: resolve_all.py REQUESTS OUT
REQUESTS: one `name cudaVersion flags` per line (`""` is the empty name, as the fake driver's
trace writes it). For each, `cuGetProcAddress_v2` (found with
dlsym on libcuda.so.1, as the runtime finds it) is asked, and OUT gets one line:
    name version flags rc status object symbol offset
`object` is the basename of the loaded object the returned pointer lies in (`-` for NULL),
`symbol` the exported symbol at that address (`-` when there is none: a culedger wrapper
instance is not exported), `offset` the address minus the object's load base (hex), which
names a wrapper instance through the library's `.symtab`. Under culedger a wrapped entry lies
in libculedger.so.
"""
import ctypes
import os
import sys


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def main(requests, out):
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    drv = ctypes.CDLL("libcuda.so.1")
    getproc = drv.cuGetProcAddress_v2
    getproc.restype = ctypes.c_int
    getproc.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                        ctypes.POINTER(ctypes.c_int)]
    lines = []
    with open(requests) as f:
        for line in f:
            if not line.strip():
                continue
            name, version, flags = line.split()
            fn, status = ctypes.c_void_p(), ctypes.c_int(-1)
            asked = b"" if name == '""' else name.encode()
            rc = getproc(asked, ctypes.byref(fn), int(version), int(flags), ctypes.byref(status))
            obj = sym = offset = "-"
            if fn.value:
                info = DlInfo()
                if libc.dladdr(fn, ctypes.byref(info)):
                    obj = os.path.basename(info.dli_fname.decode()) if info.dli_fname else "?"
                    if info.dli_sname and info.dli_saddr == fn.value:
                        sym = info.dli_sname.decode()
                    offset = hex(fn.value - info.dli_fbase)
                else:
                    obj = "?"
            lines.append(f"{name} {version} {flags} {rc} {status.value} {obj} {sym} {offset}\n")
    with open(out, "w") as f:
        f.writelines(lines)
    print(f"RESULT resolved={len(lines)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
