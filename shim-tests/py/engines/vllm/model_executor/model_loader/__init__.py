from vllm.model_executor.model_loader.default_loader import DefaultModelLoader


def get_model_loader(load_config=None):
    return DefaultModelLoader(load_config)
