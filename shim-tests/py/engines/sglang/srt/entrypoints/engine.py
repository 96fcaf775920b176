"""sglang/srt/entrypoints/engine.py (simulated): the launcher checks GPU 0 (SGLang's main
process initialises CUDA there), then starts one scheduler process per tensor-parallel rank
with multiprocessing's spawn context and waits for each to report ready or failed."""
import multiprocessing as mp
import os
import shutil
import sys
import tempfile

import simtruth
import torch


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
    from sglang.srt.managers.scheduler import run_scheduler_process
    ctx = mp.get_context("spawn")
    # An interpreter that needs a launcher (its own loader) names it for the ranks.
    if os.environ.get("SIM_PYTHON_EXECUTABLE"):
        ctx.set_executable(os.environ["SIM_PYTHON_EXECUTABLE"])
    procs, readers = [], []
    for tp_rank in range(server_args.tp_size):
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=run_scheduler_process, args=(server_args, tp_rank, tp_rank, writer))
        p.start()
        procs.append(p)
        readers.append(reader)
    failed = []
    for rank, (p, reader) in enumerate(zip(procs, readers)):
        try:
            msg = reader.recv()
        except EOFError:
            msg = {"status": "failed"}
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
