"""vllm/model_executor/model_loader/base_loader.py (simulated)."""
import torch

from vllm.model_executor.model_loader.utils import initialize_model, process_weights_after_loading


class BaseModelLoader:
    def __init__(self, load_config):
        self.load_config = load_config

    def load_model(self, vllm_config, model_config):
        target_device = torch.device("cuda")
        with target_device:
            model = initialize_model(vllm_config=vllm_config, model_config=model_config)
        self.load_weights(model, model_config)
        process_weights_after_loading(model, model_config, target_device)
        return model.eval()
