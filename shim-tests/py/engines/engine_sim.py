#!/usr/bin/env python3
"""Engine start-ups that go wrong in the ways `culedger explain` reports, on the simulated CUDA stack.

Tensor-parallel ranks start the way the simulated engines' ranks do (sglang_server.py), over
the same simulated PyTorch (``torch`` beside this file: device memory from the caching
allocator libc10_cuda.so) and with the same process titles (``setproctitle``): each selects
its GPU, reads the free memory, loads its weights (device tensors filled from the host),
reads the free memory again and sizes its pool from it (``available - total * (1 -
mem_fraction_static)``, in two halves). The launcher itself does not touch CUDA. What goes
wrong is chosen with ``--scenario``:

  shared-gpu      another job of the same run (``eval::job``, an evaluation script, say; no
                  rank environment) takes ``--other-mib`` on GPU ``--other-gpu`` after the
                  ranks read the free memory and before they allocate their pools: the rank
                  on that GPU runs out of memory while allocating its pool.
  stray-contexts  every rank reads the free memory of GPU 0 before selecting its own GPU
                  (``torch.cuda.mem_get_info()`` before ``torch.cuda.set_device(rank)``):
                  GPU 0 holds a context of every rank, so rank 0 is told less free memory
                  and sizes a smaller pool than the others.
  leak            after start-up the server serves ``--steps`` steps; each keeps a block of
                  request state (``--leak-mib``) that is never freed.

The ranks, the other job and the launcher meet at barriers (through the launcher's pipes)
so that the order of events, and the numbers, are the same in every run. Exit status: 0, or
1 when a rank ran out of memory (an out-of-memory message is printed).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import setproctitle
import torch

MIB = 1 << 20
# Bytes on the current GPU: torch.empty(n, **DEVICE_BYTES).
DEVICE_BYTES = {"dtype": torch.uint8, "device": "cuda"}


def gib(n):
    return f"{n / (1 << 30):.2f} GiB"


def barrier(name):
    """Waits until the launcher lets every process past barrier `name` (through the pipes)."""
    print(f"BARRIER {name} {json.dumps(None)}", flush=True)
    line = sys.stdin.readline()
    if not line.startswith(f"GO {name} "):
        raise RuntimeError(f"barrier {name}: the launcher answered {line!r}")


def say(who, text):
    print(f"[{who}] {text}", flush=True)


def load_weights(model_mib, layers=16):
    """Equal tensors filled from host tensors: loaded data, not a pool."""
    size = model_mib * MIB // layers
    return [torch.empty(size, **DEVICE_BYTES).copy_(torch.empty(size, dtype=torch.uint8, device="cpu")) for _ in range(layers)]


def rank_main(args):
    rank = args.rank
    who = f"rank {rank}"
    setproctitle.setproctitle(f"engine::worker_TP{rank}")
    if args.scenario == "stray-contexts":
        # The bug: the free memory of the current device (GPU 0 by default) is read before
        # the rank selects its own GPU; GPU 0 now holds a context of this process.
        torch.cuda.mem_get_info()
    barrier("started")
    torch.cuda.set_device(rank)
    free, total = torch.cuda.mem_get_info()
    say(who, f"GPU {rank}: {gib(free)} free of {gib(total)}")
    weights = load_weights(args.model_mib)
    available, total = torch.cuda.mem_get_info()
    rest = available - int(total * (1 - args.mem_fraction_static))
    say(who, f"weights loaded; available {gib(available)}, pool gets {gib(rest)}")
    barrier("probed")
    half = max(rest, 0) // 2
    try:
        pool = [torch.empty(half, **DEVICE_BYTES), torch.empty(half, **DEVICE_BYTES)]
    except torch.OutOfMemoryError as e:
        sys.stderr.write(f"[{who}] torch.OutOfMemoryError: {e} (pool)\n")
        sys.stderr.flush()
        return 1
    kept = []
    for step in range(args.steps):
        scratch = torch.empty(64 * MIB, **DEVICE_BYTES)
        kept.append(torch.empty(args.leak_mib * MIB, **DEVICE_BYTES))  # request state nobody frees
        del scratch
        time.sleep(0.02)
        if step % 10 == 9:
            free, _ = torch.cuda.mem_get_info()
            say(who, f"step {step + 1}: {gib(free)} free")
    free, _ = torch.cuda.mem_get_info()
    say(who, f"pool {gib(2 * half)}; {gib(free)} free. Ready.")
    del weights, pool, kept
    return 0


def other_main(args):
    """Another job on one GPU: waits for its turn, takes its memory, keeps it until told."""
    setproctitle.setproctitle("eval::job")
    torch.cuda.set_device(args.other_gpu)
    free, _ = torch.cuda.mem_get_info()
    barrier("ready")
    buf = torch.empty(args.other_mib * MIB, **DEVICE_BYTES)
    say("eval job", f"took {gib(args.other_mib * MIB)} on GPU {args.other_gpu} ({gib(free)} were free)")
    barrier("taken")
    sys.stdin.read()  # until the launcher closes the pipe
    del buf
    return 0


class Child:
    """A child process and its barrier pipe."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.alive = True

    def reach(self, name):
        """Relays output until the child reaches barrier `name`; False when it exited."""
        for line in self.p.stdout:
            if line.startswith(f"BARRIER {name} "):
                return True
            sys.stdout.write(line)
        self.alive = False
        return False

    def go(self, name):
        if self.alive:
            try:
                self.p.stdin.write(f"GO {name} {json.dumps({})}\n")
                self.p.stdin.flush()
            except BrokenPipeError:
                self.alive = False


def launcher(args):
    me = os.path.abspath(__file__)
    common = ["--scenario", args.scenario, "--tp", str(args.tp), "--model-mib", str(args.model_mib),
              "--mem-fraction-static", str(args.mem_fraction_static), "--steps", str(args.steps),
              "--leak-mib", str(args.leak_mib), "--other-gpu", str(args.other_gpu), "--other-mib", str(args.other_mib)]
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    say("launcher", f"scenario {args.scenario}: starting {args.tp} ranks")
    other = None
    if args.scenario == "shared-gpu":
        other = Child([sys.executable, me, "--other-job"] + common, base)
        other.reach("ready")
    ranks = [Child([sys.executable, me, "--rank", str(r)] + common,
                   dict(base, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.tp))) for r in range(args.tp)]
    for name in ("started", "probed"):
        for c in ranks:
            c.reach(name)
        if name == "probed" and other is not None:
            # After every rank read the free memory it sizes from: the other job's turn.
            other.go("ready")
            other.reach("taken")
        for c in ranks:
            c.go(name)
    failed = []
    for r, c in enumerate(ranks):
        for line in c.p.stdout:
            sys.stdout.write(line)
        if c.p.wait() != 0:
            failed.append(r)
    if other is not None:
        other.go("taken")
        other.p.stdin.close()
        for line in other.p.stdout:
            sys.stdout.write(line)
        other.p.wait()
    if failed:
        say("launcher", f"rank(s) {', '.join(map(str, failed))} failed")
        return 1
    say("launcher", "ready")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", choices=["shared-gpu", "stray-contexts", "leak"], required=True)
    ap.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks (one GPU each)")
    ap.add_argument("--model-mib", type=int, default=8192, help="weights per rank, MiB")
    ap.add_argument("--mem-fraction-static", type=float, default=0.88)
    ap.add_argument("--steps", type=int, default=0, help="serving steps after start-up")
    ap.add_argument("--leak-mib", type=int, default=32, help="request state kept per step, MiB")
    ap.add_argument("--other-gpu", type=int, default=1, help="shared-gpu: the GPU the other job uses")
    ap.add_argument("--other-mib", type=int, default=4096, help="shared-gpu: what the other job takes, MiB")
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--other-job", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        return rank_main(args)
    if args.other_job:
        return other_main(args)
    return launcher(args)


if __name__ == "__main__":
    sys.exit(main())
