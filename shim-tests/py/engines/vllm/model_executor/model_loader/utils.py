"""vllm/model_executor/model_loader/utils.py (simulated)."""
import torch


def initialize_model(vllm_config, model_config):
    from vllm.model_executor.models.llama import LlamaForCausalLM
    return LlamaForCausalLM(model_config)


def process_weights_after_loading(model, model_config, target_device):
    # A layout change through a scratch buffer (what quantized layers do), freed again.
    w = model.model.layers._modules["0"].down_proj.weight
    scratch = torch.empty_like(w)
    scratch.copy_(w)
    w.copy_(scratch)
    del scratch
