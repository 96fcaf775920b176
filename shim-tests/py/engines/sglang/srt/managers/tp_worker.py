"""sglang/srt/managers/tp_worker.py (simulated)."""
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner import ModelRunner


class TpModelWorker:
    def __init__(self, server_args, gpu_id, tp_rank, is_draft_worker=False, defer_memory_pool=False):
        self.model_config = ModelConfig.from_server_args(server_args, is_draft_worker=is_draft_worker)
        self.model_runner = ModelRunner(model_config=self.model_config,
                                        mem_fraction_static=server_args.mem_fraction_static, gpu_id=gpu_id,
                                        tp_rank=tp_rank, tp_size=server_args.tp_size, server_args=server_args,
                                        is_draft_worker=is_draft_worker, defer_memory_pool=defer_memory_pool)

    @property
    def max_total_num_tokens(self):
        return self.model_runner.max_total_num_tokens
