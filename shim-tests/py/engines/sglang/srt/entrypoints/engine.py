"""sglang/srt/entrypoints/engine.py (simulated): the launcher checks GPU 0 (SGLang's main
process initialises CUDA there), then starts one scheduler process per tensor-parallel rank
with multiprocessing's spawn context (each with the rank environment RANK, LOCAL_RANK and
WORLD_SIZE of a torchrun-style launcher) and waits for each to report ready or failed.

Where the simulation departs from SGLang (whose failing scheduler signals the launcher, which
kills the whole tree at once): every rank, ready or failed, stays alive until the launcher has
heard from all of them (the file RELEASED in the rendezvous directory). A rank that exits
early frees the contexts its peer access put on the other GPUs, so whether a slower rank's KV
pool still fails would depend on timing: the demo's outcome must not."""
import multiprocessing as mp
import os
import shutil
import sys
import tempfile

import simtruth
import torch


RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
RELEASED = "launcher.released"


def say(who, text):
    simtruth.say(f"[{who}] {text}")


def _launch_subprocesses(server_args):
    if server_args.truth_dir:
        os.environ["ENGINE_SIM_TRUTH_DIR"] = os.path.abspath(server_args.truth_dir)
    torch.cuda.set_device(0)
    free, total = torch.cuda.mem_get_info()
    ar = "nccl" if server_args.disable_custom_all_reduce else "custom"
    say("launcher", f"GPU 0 has {free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB; "
                    f"starting {server_args.tp_size} ranks ({ar} all-reduce)")
    own_dir = server_args.dist_init_dir is None
    if own_dir:
        server_args.dist_init_dir = tempfile.mkdtemp(prefix="sglang-sim-")
    released = os.path.join(server_args.dist_init_dir, RELEASED)
    if os.path.exists(released):
        os.unlink(released)
    from sglang.srt.managers.scheduler import run_scheduler_process
    ctx = mp.get_context("spawn")
    # An interpreter that needs a launcher (the tests' Debian builds: shim-tests/scenarios/src/
    # pythons.rs) starts its ranks through it too (a simulation knob, not SGLang's).
    if os.environ.get("CULEDGER_SIM_PYTHON"):
        python = os.environ["CULEDGER_SIM_PYTHON"]
        ctx.set_executable(shutil.which(python) or python)
    procs, readers = [], []
    saved = {k: os.environ.get(k) for k in RANK_ENV}
    for tp_rank in range(server_args.tp_size):
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=run_scheduler_process, args=(server_args, tp_rank, tp_rank, writer))
        # The rank environment of a torch.distributed launcher (torchrun), which a spawned child
        # inherits from the parent's environment at start: what culedger reads as rank hints.
        os.environ.update(RANK=str(tp_rank), LOCAL_RANK=str(tp_rank), WORLD_SIZE=str(server_args.tp_size))
        p.start()
        procs.append(p)
        readers.append(reader)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    msgs = []
    for reader in readers:
        try:
            msgs.append(reader.recv())
        except EOFError:
            msgs.append({"status": "failed"})
    # Every rank has its outcome: they may exit now.
    open(released, "w").close()
    failed = []
    for rank, (p, msg) in enumerate(zip(procs, msgs)):
        p.join()
        if msg.get("status") != "ready" or p.exitcode != 0:
            failed.append(rank)
    if own_dir:
        shutil.rmtree(server_args.dist_init_dir, ignore_errors=True)
    if failed:
        say("launcher", f"rank(s) {', '.join(map(str, failed))} failed: server start-up aborted")
        return 1
    say("launcher", "server ready")
    return 0


if __name__ == "__main__":
    sys.exit(1)
