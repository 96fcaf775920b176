"""Check 3 (and the timed runs of check 7): a tiny inference engine, built the way serving engines
build theirs, in the order SGLang does:

1. weights: a few transformer layers with random weights, loaded with `load_state_dict` and moved
   to the GPU with `Module.to` (`TinyEngine.load_weights`);
2. the KV pool sized from `torch.cuda.mem_get_info()` with SGLang's formula
   (`ModelRunner.profile_max_num_token`: rest = free - total * (1 - mem_fraction_static), tokens =
   rest // cell size), capped so the kit stays quick, allocated as per-layer K and V buffers plus
   a request-to-token table (`TinyEngine.init_memory_pool`);
3. CUDA graphs for several batch sizes captured with `torch.cuda.graph` into one shared pool,
   static inputs allocated before capture (`TinyEngine.capture_graphs`);
4. a decode loop replaying the largest graph, each step synchronised and timed.

The script's own accounting: each phase starts and ends with `torch.cuda.empty_cache()`, and
its cost is the change of `torch.cuda.memory_reserved()` (the segments that stay, which is what
the caching allocator asked CUDA for). `--bench` runs the same engine and reports only the
decode-step times (check 7 runs it with and without culedger).
"""
import argparse
import os
import time

from common import finish, kit, tag

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--bench", action="store_true")
args = ap.parse_args()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

D, LAYERS, HEADS, VOCAB, FF = 1024, 4, 8, 32000, 4096
HEAD_DIM = D // HEADS
CTX = 256  # cached tokens each decode step attends to
BATCHES = (1, 2, 4, 8)
MAX_REQS, MAX_CONTEXT = 256, 4096
MEM_FRACTION_STATIC = 0.5
KV_CAP = 4 << 30  # the kit's cap on the pool (a server would take what the formula gives)
WARMUP = 20


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, k_cache, v_cache, pos):
        q, k, v = self.qkv(self.norm1(x)).view(-1, 3, HEADS, HEAD_DIM).unbind(1)
        k_cache.index_copy_(0, pos, k)
        v_cache.index_copy_(0, pos, v)
        att = torch.einsum("bhd,thd->bht", q, k_cache[:CTX]) * HEAD_DIM ** -0.5
        out = torch.einsum("bht,thd->bhd", att.softmax(-1), v_cache[:CTX]).reshape(-1, D)
        x = x + self.o(out)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, tokens, k_buffers, v_buffers, pos):
        x = self.embed(tokens)
        for layer, k, v in zip(self.layers, k_buffers, v_buffers):
            x = layer(x, k, v, pos)
        return self.lm_head(self.norm(x)).argmax(-1)


class TinyEngine:
    def __init__(self, dev):
        self.dev = dev
        self.truth = {}

    def reserved(self):
        torch.cuda.synchronize(self.dev)
        return torch.cuda.memory_reserved(self.dev)

    def phase(self, category, step):
        torch.cuda.empty_cache()
        before = self.reserved()
        step()
        torch.cuda.empty_cache()
        self.truth[category] = self.truth.get(category, 0) + self.reserved() - before

    def load_weights(self):
        model = TinyModel()
        checkpoint = {k: torch.randn_like(v) * 0.02 for k, v in model.state_dict().items()}
        model.load_state_dict(checkpoint)
        self.model = model.to(device=f"cuda:{self.dev}", dtype=torch.bfloat16).eval()
        self.param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())

    def init_memory_pool(self):
        free, total = torch.cuda.mem_get_info(self.dev)
        cell = LAYERS * 2 * HEADS * HEAD_DIM * 2  # bytes per token: K and V of every layer, bf16
        rest = free - total * (1 - MEM_FRACTION_STATIC)
        self.tokens = max(2 * CTX, min(int(max(rest, 0) // cell), KV_CAP // cell))
        shape = (self.tokens, HEADS, HEAD_DIM)
        self.k = [torch.zeros(shape, dtype=torch.bfloat16, device=f"cuda:{self.dev}") for _ in range(LAYERS)]
        self.v = [torch.zeros(shape, dtype=torch.bfloat16, device=f"cuda:{self.dev}") for _ in range(LAYERS)]
        self.req_to_token = torch.zeros((MAX_REQS, MAX_CONTEXT), dtype=torch.int32, device=f"cuda:{self.dev}")

    def static_buffers(self):
        cuda = f"cuda:{self.dev}"
        self.inputs = {bs: (torch.zeros(bs, dtype=torch.long, device=cuda), torch.arange(CTX, CTX + bs, device=cuda))
                       for bs in BATCHES}

    def warm_up(self):
        side = torch.cuda.Stream(self.dev)
        side.wait_stream(torch.cuda.current_stream(self.dev))
        with torch.cuda.stream(side), torch.no_grad():
            for bs in BATCHES:
                for _ in range(2):
                    self.model(self.inputs[bs][0], self.k, self.v, self.inputs[bs][1])
        torch.cuda.current_stream(self.dev).wait_stream(side)

    def capture_graphs(self):
        self.graphs, pool = {}, None
        with torch.no_grad():
            for bs in sorted(BATCHES, reverse=True):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    out = self.model(self.inputs[bs][0], self.k, self.v, self.inputs[bs][1])
                pool = g.pool()
                self.graphs[bs] = (g, out)

    def decode(self, steps):
        g, out = self.graphs[max(BATCHES)]
        for _ in range(WARMUP):
            g.replay()
        torch.cuda.synchronize(self.dev)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            g.replay()
            torch.cuda.synchronize(self.dev)
            times.append(time.perf_counter() - t0)
        return times


def main():
    dev = torch.cuda.current_device()
    e = TinyEngine(dev)
    e.phase("weights", e.load_weights)
    # The weights are found by the torch pack (Module.to); the pool, capped at KV_CAP, takes less
    # than half of what its query reported, which the phase fallback does not take for a pool.
    with tag("kv_pool"):
        e.phase("kv_pool", e.init_memory_pool)
    e.phase("other", e.static_buffers)
    e.phase("warm-up", e.warm_up)
    e.phase("graphs", e.capture_graphs)
    times = e.decode(args.steps)
    truth = {k: e.truth[k] for k in ("weights", "kv_pool", "graphs")}
    fields = dict(pid=os.getpid(), device=dev, step_s=times)
    if not args.bench:
        fields.update(truth=truth, other=e.truth["other"], warm_up_left=e.truth["warm-up"],
                      param_bytes=e.param_bytes, kv_tokens=e.tokens, reserved=e.reserved(),
                      functions=["load_weights", "init_memory_pool", "capture_graphs"])
    kit(**fields)
    finish()


if __name__ == "__main__":
    main()
