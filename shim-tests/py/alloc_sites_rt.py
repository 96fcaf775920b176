#!/usr/bin/env python3
"""Large allocations (2 MiB) repeated through ctypes from places whose native frames are the
same: two lines of one function taking turns (L1, L2), one function reached through two callers
two frames up (X, Y), and a Python thread (T). Warm-up rounds first (freed: the interpreter
specialises its calls), then measured rounds whose allocations stay live.

Output: ``RESULT alloc=<json, no spaces>`` per live allocation: {"tag", "ptr", "want": [[function, line],
...] innermost first, four frames}. Exit status 0. Python standard library only.
"""
import ctypes
import json
import sys
import threading

rt = ctypes.CDLL("libcudart.so.12")
SIZE = 2 << 20
KEEP = False


def note(tag, ptr, frame):
    if not KEEP:
        assert rt.cudaFree(ctypes.c_void_p(ptr)) == 0
        return
    want = []
    while frame is not None and len(want) < 4:
        want.append([frame.f_code.co_name, frame.f_lineno])
        frame = frame.f_back
    print("RESULT alloc=" + json.dumps({"tag": tag, "ptr": ptr, "want": want}, separators=(",", ":")), flush=True)


def two_lines(rounds):
    for _ in range(rounds):
        p = ctypes.c_void_p(); assert rt.cudaMalloc(ctypes.byref(p), SIZE) == 0; note("L1", p.value, sys._getframe())  # noqa: E702
        q = ctypes.c_void_p(); assert rt.cudaMalloc(ctypes.byref(q), SIZE) == 0; note("L2", q.value, sys._getframe())  # noqa: E702


def leaf(tag):
    p = ctypes.c_void_p(); assert rt.cudaMalloc(ctypes.byref(p), SIZE) == 0; note(tag, p.value, sys._getframe())  # noqa: E702


def mid(tag):
    leaf(tag)


def via_x():
    mid("X")


def via_y():
    mid("Y")


def callers(rounds):
    for _ in range(rounds):
        via_x()
        via_y()


def in_thread(rounds):
    for _ in range(rounds):
        mid("T")


def everything(rounds):
    two_lines(rounds)
    callers(rounds)
    t = threading.Thread(target=in_thread, args=(rounds,))
    t.start()
    t.join()


def main():
    global KEEP
    assert rt.cudaSetDevice(0) == 0
    everything(16)
    KEEP = True
    everything(3)


if __name__ == "__main__":
    main()
