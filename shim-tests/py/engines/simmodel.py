"""A Llama-shaped model for the simulated engines (sim-only module; each engine's
``models/llama.py`` subclasses it). Parameters are created on the default device (``with
torch.device(...)``), weights come from a synthetic checkpoint of host tensors, and a forward
pass allocates and frees activations through the caching allocator without computing anything.

``LlamaShape.for_budget(model_mib, tp, layers)`` picks a hidden size so that one rank's weights
come close to ``model_mib`` MiB: per rank, embeddings and head take 2 * V * H / tp bf16 values,
a layer 13 * H^2 / tp (qkv with 8-to-1 grouped heads, o, gate_up and down with I = 3.5 H) plus
two norms of H values."""
import math

import torch
from torch import nn

MIB = 1 << 20
HEAD_DIM = 128


class LlamaShape:
    def __init__(self, hidden, layers, tp, vocab=128256, context_len=8192, kv_heads=None, intermediate=None):
        self.hidden, self.layers, self.tp, self.vocab, self.context_len = hidden, layers, tp, vocab, context_len
        self.heads = hidden // HEAD_DIM
        self.kv_heads = kv_heads or max(1, self.heads // 8)
        self.intermediate = intermediate or (hidden * 7 // 2 + 255) // 256 * 256
        self.dtype = torch.bfloat16

    @staticmethod
    def from_config(model_dir, tp):
        """The shape a Hugging Face ``config.json`` in `model_dir` gives (a Llama: bf16, head
        size 128): hidden_size, num_hidden_layers, num_key_value_heads, intermediate_size,
        vocab_size, and max_position_embeddings for the context length."""
        import json
        import os
        with open(os.path.join(model_dir, "config.json")) as f:
            c = json.load(f)
        assert c["hidden_size"] // c["num_attention_heads"] == HEAD_DIM, "the simulation's head size is 128"
        return LlamaShape(c["hidden_size"], c["num_hidden_layers"], tp, c.get("vocab_size", 128256),
                          c.get("max_position_embeddings", 8192), c.get("num_key_value_heads"),
                          c.get("intermediate_size"))

    @staticmethod
    def for_budget(model_mib, tp, layers=32, vocab=128256):
        a = 26.0 * layers / tp
        b = 4.0 * vocab / tp
        m = model_mib * MIB
        h = (-b + math.sqrt(b * b + 4 * a * m)) / (2 * a)
        hidden = max(HEAD_DIM * 8, int(h) // HEAD_DIM * HEAD_DIM)
        return LlamaShape(hidden, layers, tp, vocab)

    def kv_heads_per_rank(self):
        return max(1, self.kv_heads // self.tp)

    def kv_cell_bytes(self):
        """KV cache bytes per token on one rank (K and V, every layer, bf16)."""
        return self.kv_heads_per_rank() * HEAD_DIM * self.layers * 2 * 2


class Linear(nn.Module):
    def __init__(self, in_features, out_features, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype))
        self.quant_method = None


class Embedding(nn.Module):
    def __init__(self, num, dim, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num, dim, dtype=dtype))


class RMSNorm(nn.Module):
    def __init__(self, dim, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype))


class DecoderLayer(nn.Module):
    def __init__(self, s):
        super().__init__()
        h, tp, d = s.hidden, s.tp, s.dtype
        qkv = (s.heads + 2 * s.kv_heads) * HEAD_DIM
        self.qkv_proj = Linear(h, qkv // tp, d)
        self.o_proj = Linear(h // tp, h, d)
        self.gate_up_proj = Linear(h, 2 * s.intermediate // tp, d)
        self.down_proj = Linear(s.intermediate // tp, h, d)
        self.input_layernorm = RMSNorm(h, d)
        self.post_attention_layernorm = RMSNorm(h, d)


class LlamaModel(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed_tokens = Embedding(s.vocab // s.tp, s.hidden, s.dtype)
        self.layers = nn.Module()
        for i in range(s.layers):
            self.layers.add_module(str(i), DecoderLayer(s))
        self.norm = RMSNorm(s.hidden, s.dtype)


class LlamaForCausalLMBase(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.shape = shape
        self.model = LlamaModel(shape)
        self.lm_head = Linear(shape.hidden, shape.vocab // shape.tp, shape.dtype)

    def forward(self, num_tokens, all_reduce=None):
        """Activations of one pass over `num_tokens` tokens; returns the logits tensor."""
        s = self.shape
        h = torch.empty(num_tokens, s.hidden, dtype=s.dtype, device="cuda")
        for _ in range(s.layers):
            qkv = torch.empty(num_tokens, (s.heads + 2 * s.kv_heads) * HEAD_DIM // s.tp, dtype=s.dtype, device="cuda")
            attn = torch.empty(num_tokens, s.hidden, dtype=s.dtype, device="cuda")
            del qkv
            attn = all_reduce(attn) if all_reduce else attn
            gate_up = torch.empty(num_tokens, 2 * s.intermediate // s.tp, dtype=s.dtype, device="cuda")
            down = torch.empty(num_tokens, s.hidden, dtype=s.dtype, device="cuda")
            del gate_up, attn
            h = all_reduce(down) if all_reduce else down
        return torch.empty(min(num_tokens, 256), s.vocab // s.tp, dtype=torch.float32, device="cuda")


def checkpoint(model):
    """The synthetic checkpoint: (name, host tensor) per parameter, shard by shard."""
    for name, p in model.named_parameters():
        yield name, torch.empty(p.shape, dtype=p.dtype, device="cpu")
