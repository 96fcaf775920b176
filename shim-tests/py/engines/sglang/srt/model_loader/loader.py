"""sglang/srt/model_loader/loader.py (simulated): DefaultModelLoader.load_model creates the
parameters on the device (under torch.device), loads them from host tensors, then lets each
layer's quant method post-process its weights (a repacking scratch, freed again)."""
import torch

from sglang.srt.model_loader.weight_utils import default_weight_loader, safetensors_weights_iterator
from sglang.srt.models.llama import LlamaForCausalLM


class UnquantizedLinearMethod:
    def process_weights_after_loading(self, layer):
        # Repack into a scratch buffer and back (what layout conversions do).
        scratch = torch.empty_like(layer.weight)
        scratch.copy_(layer.weight)
        layer.weight.copy_(scratch)
        del scratch


def _initialize_model(model_config):
    return LlamaForCausalLM(model_config.shape)


class DefaultModelLoader:
    def __init__(self, load_config):
        self.load_config = load_config

    def load_model(self, *, model_config, device_config):
        with torch.device(device_config):
            model = _initialize_model(model_config)
        self.load_weights_and_postprocess(model, safetensors_weights_iterator(model))
        return model.eval()

    @staticmethod
    def load_weights_and_postprocess(model, weights):
        model.load_weights(weights)
        for _, module in model.named_modules():
            quant_method = getattr(module, "quant_method", None)
            if quant_method is not None:
                quant_method.process_weights_after_loading(module)
