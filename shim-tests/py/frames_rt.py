#!/usr/bin/env python3
"""Allocations through ctypes from frames the raw walker must read: a generator, an asyncio
coroutine, deep recursion, code under ``sys.settrace``; then a ``multiprocessing`` child ended
with ``terminate()``, and a daemon thread still allocating when the interpreter exits.

Output: ``RESULT tag=ptr`` per allocation, ``RESULT mp_exitcode=N``. Exit status 0.
Python standard library only.
"""
import asyncio
import ctypes
import multiprocessing
import sys
import threading
import time

rt = ctypes.CDLL("libcudart.so.12")


def alloc(tag):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 16 << 20) == 0
    print(f"RESULT {tag}={p.value}", flush=True)


def in_generator():
    alloc("generator")
    yield 1


async def in_coroutine():
    await asyncio.sleep(0)
    alloc("coroutine")


def deep(n):
    if n == 0:
        alloc("recursion")
        return
    deep(n - 1)


def traced():
    alloc("settrace")


def churn_forever():
    while True:
        p = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(p), 4096)
        rt.cudaFree(p)


def sleeper():
    time.sleep(60)


def main():
    assert rt.cudaSetDevice(0) == 0
    list(in_generator())
    asyncio.run(in_coroutine())
    deep(800)
    sys.settrace(lambda *args: None)
    traced()
    sys.settrace(None)
    child = multiprocessing.get_context("fork").Process(target=sleeper)
    child.start()
    time.sleep(0.2)
    child.terminate()
    child.join(20)
    print(f"RESULT mp_exitcode={child.exitcode}", flush=True)
    threading.Thread(target=churn_forever, daemon=True).start()
    time.sleep(0.2)


if __name__ == "__main__":
    main()
