"""sglang/srt/model_loader/weight_utils.py (simulated)."""
import simmodel


def safetensors_weights_iterator(model):
    """(name, host tensor) from the synthetic checkpoint."""
    yield from simmodel.checkpoint(model)


def default_weight_loader(param, loaded_weight):
    param.data.copy_(loaded_weight)
