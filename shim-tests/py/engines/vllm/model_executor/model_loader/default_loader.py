"""vllm/model_executor/model_loader/default_loader.py (simulated)."""
import simmodel

from vllm.model_executor.model_loader.base_loader import BaseModelLoader


class DefaultModelLoader(BaseModelLoader):
    def get_all_weights(self, model_config, model):
        yield from simmodel.checkpoint(model)

    def load_weights(self, model, model_config):
        model.load_weights(self.get_all_weights(model_config, model))
