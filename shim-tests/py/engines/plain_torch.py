#!/usr/bin/env python3
"""A plain PyTorch-style inference script, no serving engine: a model built on the host and
moved with ``model.to("cuda")`` (or, with ``--raw-weights``, each weight allocated on the device
and copied from the host in the script's own code), a KV cache built by hand from what
``torch.cuda.mem_get_info()`` reports, then a few decoding steps. No engine pack applies: the
phase fallback has to tell the weights and the KV cache apart.

Usage: plain_torch.py [--model-mib M] [--layers L] [--kv-fraction F] [--raw-weights]
[--truth-dir D]. Single process, GPU 0."""
import argparse
import os
import sys

import simmodel
import torch
from simtruth import truth


def build_model(args):
    shape = simmodel.LlamaShape.for_budget(args.model_mib, 1, args.layers)
    with truth.category("weights"):
        model = simmodel.LlamaForCausalLMBase(shape)  # on the host
        if args.raw_weights:
            load_raw(model)
        else:
            model.to("cuda")
    return model


def load_raw(model):
    """Each parameter allocated on the device and filled from the host by hand."""
    for name, host in simmodel.checkpoint(model):
        dev = torch.empty(host.shape, dtype=host.dtype, device="cuda")
        dev.copy_(host)
        module_name, _, pname = name.rpartition(".")
        module = dict(model.named_modules())[module_name]
        module._parameters[pname] = torch.nn.Parameter(dev)


def build_kv_cache(model, fraction):
    s = model.shape
    free, total = torch.cuda.mem_get_info()
    per_token = s.kv_cell_bytes()
    tokens = int(free * fraction) // per_token
    with truth.category("kv_pool"):
        k = [torch.zeros(tokens, s.kv_heads, 128, dtype=s.dtype, device="cuda") for _ in range(s.layers)]
        v = [torch.zeros(tokens, s.kv_heads, 128, dtype=s.dtype, device="cuda") for _ in range(s.layers)]
    print(f"KV cache: {tokens} tokens, {2 * s.layers * tokens * s.kv_heads * 256 / 2**30:.2f} GiB of "
          f"{free / 2**30:.2f} GiB free", flush=True)
    return k, v


def generate(model, steps):
    for step in range(steps):
        input_ids = torch.tensor(list(range(64)), device="cuda")
        logits = model(64)
        del input_ids, logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-mib", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--kv-fraction", type=float, default=0.8)
    ap.add_argument("--raw-weights", action="store_true")
    ap.add_argument("--truth-dir", default=None)
    args = ap.parse_args()
    if args.truth_dir:
        os.environ["ENGINE_SIM_TRUTH_DIR"] = os.path.abspath(args.truth_dir)
    truth.role = "plain torch"
    torch.cuda.set_device(0)
    model = build_model(args)
    k, v = build_kv_cache(model, args.kv_fraction)
    generate(model, 3)
    free, _ = torch.cuda.mem_get_info()
    print(f"done; {free / 2**30:.2f} GiB free", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
