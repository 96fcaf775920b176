"""vllm/v1/executor/multiproc_executor.py (simulated): one WorkerProc per rank (spawn), driven
through the engine's steps: init_device, load_model, determine_available_memory (the executor
takes the minimum over the ranks), initialize_from_config, compile_or_warm_up_model."""
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
from simtruth import say, truth


class WorkerProc:
    @staticmethod
    def worker_main(vllm_config, rank, pipe):
        truth.role = f"vllm rank {rank}"
        try:
            from vllm.v1.worker.gpu_worker import Worker
            worker = Worker(vllm_config, local_rank=rank, rank=rank,
                            distributed_init_method="file://" + os.path.abspath(vllm_config.dist_init_dir))
            worker.init_device()
            worker.load_model()
            available = worker.determine_available_memory()
            everyone = [None] * vllm_config.tensor_parallel_size
            dist.all_gather_object(everyone, available)
            # vllm 0.33 v1/core/kv_cache_planning.py get_kv_cache_configs ->
            # _check_enough_kv_cache_memory: no KV cache, or less than one request of
            # max_model_len tokens, is refused before any is allocated.
            from vllm.v1.core.kv_cache_planning import check_kv_cache_configs
            runner = worker.model_runner
            check_kv_cache_configs(vllm_config, runner.page_size_bytes() * runner.shape.layers, everyone)
            kv_cache_config = worker.model_runner.get_kv_cache_config(min(everyone))
            # vllm 0.33 v1/core/kv_cache_utils.py update_kv_cache_capacity (one group of
            # full-attention layers: every block holds block_size tokens).
            say(f"[rank {rank}] GPU KV cache size: {kv_cache_config.num_blocks * vllm_config.block_size:,} tokens")
            worker.initialize_from_config(kv_cache_config)
            worker.compile_or_warm_up_model()
            free, _ = torch.cuda.mem_get_info()
            say(f"[rank {rank}] ready: {kv_cache_config.num_blocks} KV blocks; {free / 2**30:.2f} GiB free")
            truth.write()
            pipe.send("ready")
        except Exception as e:
            truth.status = "failed"
            dist.mark_dead()
            sys.stderr.write(f"[rank {rank}] {type(e).__name__}: {e}\n{traceback.format_exc()}")
            truth.write()
            pipe.send("failed")
            sys.exit(1)


class MultiprocExecutor:
    def __init__(self, vllm_config):
        self.vllm_config = vllm_config

    def run(self):
        c = self.vllm_config
        if c.truth_dir:
            os.environ["ENGINE_SIM_TRUTH_DIR"] = os.path.abspath(c.truth_dir)
        own_dir = c.dist_init_dir is None
        if own_dir:
            c.dist_init_dir = tempfile.mkdtemp(prefix="vllm-sim-")
        ctx = mp.get_context("spawn")
        # An interpreter that needs a launcher (its own loader) names it for the ranks.
        if os.environ.get("CULEDGER_SIM_PYTHON"):
            python = os.environ["CULEDGER_SIM_PYTHON"]
            ctx.set_executable(shutil.which(python) or python)
        procs = []
        for rank in range(c.tensor_parallel_size):
            reader, writer = ctx.Pipe(duplex=False)
            p = ctx.Process(target=WorkerProc.worker_main, args=(c, rank, writer))
            p.start()
            procs.append((p, reader))
        failed = []
        for rank, (p, reader) in enumerate(procs):
            try:
                status = reader.recv()
            except EOFError:
                status = "failed"
            p.join()
            if status != "ready" or p.exitcode != 0:
                failed.append(rank)
        if own_dir:
            shutil.rmtree(c.dist_init_dir, ignore_errors=True)
        say(f"[executor] {'workers ready' if not failed else f'worker(s) {failed} failed'}")
        return 1 if failed else 0
