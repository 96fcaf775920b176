"""sglang/srt/managers/tp_worker.py (simulated)."""
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner import ModelRunner


class TpModelWorker:
    def __init__(self, server_args, gpu_id, tp_rank):
        self.model_config = ModelConfig.from_server_args(server_args)
        self.model_runner = ModelRunner(model_config=self.model_config,
                                        mem_fraction_static=server_args.mem_fraction_static, gpu_id=gpu_id,
                                        tp_rank=tp_rank, tp_size=server_args.tp_size, server_args=server_args)
        self.max_total_num_tokens = self.model_runner.max_total_num_tokens
