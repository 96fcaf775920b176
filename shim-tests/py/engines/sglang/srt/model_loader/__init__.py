from sglang.srt.model_loader.loader import DefaultModelLoader


def get_model_loader(load_config=None):
    return DefaultModelLoader(load_config)
