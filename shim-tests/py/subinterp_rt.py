#!/usr/bin/env python3
"""An allocation made inside a subinterpreter (``_xxsubinterpreters.run_string``, CPython 3.10 to
3.12), through ctypes (which releases the GIL). Its call site must name the subinterpreter's own
frames (``alloc_in_subinterpreter``), not the main interpreter's ``run_string`` line.

Output: ``RESULT sub_ptr=... rc=...``. Python standard library only.
"""
import ctypes
import _xxsubinterpreters as interpreters

CODE = """
import ctypes
rt = ctypes.CDLL("libcudart.so.12")

def alloc_in_subinterpreter():
    p = ctypes.c_void_p()
    rc = rt.cudaMalloc(ctypes.byref(p), 64 << 20)
    print("RESULT sub_ptr=%d rc=%d" % (p.value or 0, rc), flush=True)

alloc_in_subinterpreter()
"""

def main():
    rt = ctypes.CDLL("libcudart.so.12")
    assert rt.cudaSetDevice(0) == 0
    interp = interpreters.create()
    interpreters.run_string(interp, CODE)

main()
