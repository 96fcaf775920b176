"""sglang/srt/managers/scheduler.py (simulated): one process per tensor-parallel rank."""
import os
import sys
import time
import traceback

import setproctitle
import torch
from simtruth import say, truth

from sglang.srt.managers.tp_worker import TpModelWorker


class Scheduler:
    def __init__(self, server_args, gpu_id, tp_rank):
        spec = server_args.speculative_algorithm is not None
        # sglang 0.5.23 (--draft-before-sizing): init_model_worker builds the target worker and
        # the draft worker, then init_memory_pools sizes and allocates the target's pool. Before:
        # the target worker's ModelRunner sized its pool in its constructor, and the draft
        # worker came after it.
        early = spec and server_args.draft_before_sizing
        self.tp_worker = TpModelWorker(server_args=server_args, gpu_id=gpu_id, tp_rank=tp_rank,
                                       defer_memory_pool=early)
        self.draft_worker = None
        if spec:
            from sglang.srt.speculative.eagle_worker import EAGLEWorker
            self.draft_worker = EAGLEWorker(server_args, gpu_id, tp_rank, target_worker=self.tp_worker)
        if early:
            self.tp_worker.model_runner.finish_initialize()
        self.max_total_num_tokens = self.tp_worker.max_total_num_tokens


def serve(until):
    """Stays up like a serving rank (its memory held) until the file `until` exists."""
    deadline = time.monotonic() + 600
    while until and not os.path.exists(until) and time.monotonic() < deadline:
        time.sleep(0.05)


def wait_for_release(server_args):
    """Until the launcher has every rank's outcome (entrypoints/engine.py, RELEASED); at most
    two minutes, in case the launcher is gone."""
    released = os.path.join(server_args.dist_init_dir, "launcher.released")
    deadline = time.monotonic() + 120
    while not os.path.exists(released) and time.monotonic() < deadline:
        time.sleep(0.01)


def run_scheduler_process(server_args, gpu_id, tp_rank, pipe_writer):
    # Generate the prefix and configure the process, as SGLang's run_scheduler_process does.
    prefix = f" TP{tp_rank}" if server_args.tp_size > 1 else ""
    setproctitle.setproctitle(f"sglang::scheduler{prefix.replace(' ', '_')}")
    truth.role = f"sglang rank {tp_rank}"
    try:
        scheduler = Scheduler(server_args, gpu_id, tp_rank)
        free, _ = torch.cuda.mem_get_info()
        say(f"[rank {tp_rank}] ready: {scheduler.max_total_num_tokens} tokens in the KV pool; "
            f"{free / 2**30:.2f} GiB free")
        truth.write()
        pipe_writer.send({"status": "ready", "max_total_num_tokens": scheduler.max_total_num_tokens})
        wait_for_release(server_args)
        serve(server_args.serve_until)
    except Exception as e:
        truth.status = "failed"
        torch.distributed.mark_dead()
        # One write, so that the ranks' messages do not interleave.
        detail = "" if isinstance(e, torch.OutOfMemoryError) else traceback.format_exc()
        sys.stderr.write(f"[rank {tp_rank}] {type(e).__module__}.{type(e).__name__}: {e}\n{detail}")
        sys.stderr.flush()
        truth.write()
        pipe_writer.send({"status": "failed", "error": str(e)})
        wait_for_release(server_args)
        sys.exit(1)
