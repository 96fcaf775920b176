"""sglang/srt/configs/model_config.py (simulated): the shape of the simulated model."""
from simmodel import LlamaShape


class ModelConfig:
    def __init__(self, shape, context_len):
        self.shape, self.context_len = shape, context_len
        self.num_hidden_layers = shape.layers
        self.head_dim = 128

    @staticmethod
    def from_server_args(server_args, is_draft_worker=False):
        if is_draft_worker:
            # The draft model (an EAGLE head: one decoder layer) of --speculative-draft-model-mib.
            shape = LlamaShape.for_budget(server_args.speculative_draft_model_mib, server_args.tp_size, 1)
            return ModelConfig(shape, server_args.context_length)
        import os
        if os.path.isfile(os.path.join(server_args.model_path, "config.json")):
            # --model-path names a model's directory: its config.json gives the shape.
            return ModelConfig(LlamaShape.from_config(server_args.model_path, server_args.tp_size),
                               server_args.context_length)
        shape = LlamaShape.for_budget(server_args.model_mib, server_args.tp_size, server_args.layers)
        return ModelConfig(shape, server_args.context_length)

    def get_num_kv_heads(self, tp_size):
        return self.shape.kv_heads_per_rank()
