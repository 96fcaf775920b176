"""sglang/srt/layers/attention/flashinfer_backend.py (simulated): the workspace buffer."""
import torch


class FlashInferAttnBackend:
    def __init__(self, model_runner):
        mib = model_runner.server_args.attention_workspace_mib
        self.workspace_buffer = torch.empty(mib << 20, dtype=torch.uint8, device=model_runner.device)
