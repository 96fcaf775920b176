"""vllm/model_executor/models/llama.py (simulated)."""
from simmodel import LlamaForCausalLMBase


def default_weight_loader(param, loaded_weight):
    param.data.copy_(loaded_weight)


class LlamaForCausalLM(LlamaForCausalLMBase):
    def load_weights(self, weights):
        params_dict = dict(self.named_parameters())
        loaded = set()
        for name, loaded_weight in weights:
            param = params_dict[name]
            getattr(param, "weight_loader", default_weight_loader)(param, loaded_weight)
            loaded.add(name)
        return loaded
