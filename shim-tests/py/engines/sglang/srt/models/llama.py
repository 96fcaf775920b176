"""sglang/srt/models/llama.py (simulated)."""
from simmodel import LlamaForCausalLMBase

from sglang.srt.model_loader.weight_utils import default_weight_loader


class LlamaForCausalLM(LlamaForCausalLMBase):
    def __init__(self, shape):
        super().__init__(shape)
        from sglang.srt.model_loader.loader import UnquantizedLinearMethod
        self.model.layers._modules["0"].gate_up_proj.quant_method = UnquantizedLinearMethod()

    def load_weights(self, weights):
        params_dict = dict(self.named_parameters())
        for name, loaded_weight in weights:
            param = params_dict[name]
            weight_loader = getattr(param, "weight_loader", default_weight_loader)
            weight_loader(param, loaded_weight)
