"""Self-test of checks 3 and 7: ../workloads/engine.py's tiny engine on the simulated runtime,
through the torch-like caching allocator of torch_alloc.py, phase by phase in SGLang's order:
weights filled from host (TinyEngine.load_weights), the KV pool sized from cudaMemGetInfo with
SGLang's formula (TinyEngine.init_memory_pool), static buffers, a warm-up whose memory is given
back, graphs captured in relaxed mode into a private pool (TinyEngine.capture_graphs), and a
decode loop of graph launches. The script's accounting is each phase's segments, as
memory_reserved() deltas would give them."""
import argparse
import ctypes
import os
import sys
import time

sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))
from common import finish, kit, tag  # noqa: E402

import simcuda as cu  # noqa: E402
from torch_alloc import Native, Pool  # noqa: E402

D, LAYERS, HEADS, VOCAB, FF = 1024, 4, 8, 32000, 4096
HEAD_DIM = D // HEADS
BATCHES = (1, 2, 4, 8)
MAX_REQS, MAX_CONTEXT = 256, 4096
MEM_FRACTION_STATIC = 0.5
KV_CAP = 1 << 30
BF16 = 2


def parameter_sizes():
    """Bytes of every parameter of ../workloads/engine.py's TinyModel in bf16."""
    sizes = [VOCAB * D * BF16]
    for _ in range(LAYERS):
        sizes += [D * BF16] * 4 + [3 * D * D * BF16, D * D * BF16, FF * D * BF16, D * FF * BF16]
    return sizes + [D * BF16] * 2 + [VOCAB * D * BF16]


class TinyEngine:
    def __init__(self):
        self.cache = Native()
        self.truth = {}

    def phase(self, category, step):
        before = self.cache.reserved()
        step()
        self.truth[category] = self.cache.reserved() - before

    def load_weights(self):
        self.params = []
        for n in parameter_sizes():
            p, size = self.cache.alloc(n)
            cu.upload(p, n)
            self.params.append(p)
        self.param_bytes = sum(parameter_sizes())

    def init_memory_pool(self):
        free, total = cu.mem_get_info()
        cell = LAYERS * 2 * HEADS * HEAD_DIM * BF16
        rest = free - total * (1 - MEM_FRACTION_STATIC)
        self.tokens = max(512, min(int(max(rest, 0) // cell), KV_CAP // cell))
        nbytes = self.tokens * HEADS * HEAD_DIM * BF16
        self.k = [self.cache.alloc(nbytes)[0] for _ in range(LAYERS)]
        self.v = [self.cache.alloc(nbytes)[0] for _ in range(LAYERS)]
        self.req_to_token = self.cache.alloc(MAX_REQS * MAX_CONTEXT * 4)[0]

    def static_buffers(self):
        self.inputs = {bs: (self.cache.alloc(bs * 8), self.cache.alloc(bs * 8)) for bs in BATCHES}

    def warm_up(self):
        # Activations of a separate pool whose segments are given back (empty_cache).
        scratch = []
        pool = Pool(lambda size: scratch.append(cu.malloc(size)) or scratch[-1])
        for bs in BATCHES:
            for n in (bs * D * BF16, bs * 3 * D * BF16, bs * FF * BF16, bs * VOCAB * 4):
                pool.alloc(n, max(2 << 20, (n + (2 << 20) - 1) // (2 << 20) * (2 << 20)))
        for p in scratch:
            cu.free(p)

    def capture_graphs(self):
        stream = ctypes.c_void_p()
        cu.check(cu.rt.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
        self.stream = stream.value
        mode = ctypes.c_int(cu.CAPTURE_RELAXED)
        cu.check(cu.rt.cudaThreadExchangeStreamCaptureMode(ctypes.byref(mode)), "cudaThreadExchangeStreamCaptureMode")
        private = Pool(cu.malloc)  # the graphs' shared pool (torch.cuda.graph(pool=...))
        self.graphs = {}
        for bs in sorted(BATCHES, reverse=True):
            cu.check(cu.rt.cudaStreamBeginCapture(self.stream, cu.CAPTURE_RELAXED), "cudaStreamBeginCapture")
            # Activations, logits and an attention workspace of 3 MiB per sequence.
            for n in (bs * D * BF16, bs * 3 * D * BF16, bs * FF * BF16, bs * VOCAB * 4, bs * (3 << 20)):
                size = (n + 511) // 512 * 512
                private.alloc(size, 2 << 20 if size <= 1 << 20 else 20 << 20 if size <= 10 << 20 else size)
            g, e = ctypes.c_void_p(), ctypes.c_void_p()
            cu.check(cu.rt.cudaStreamEndCapture(self.stream, ctypes.byref(g)), "cudaStreamEndCapture")
            cu.check(cu.rt.cudaGraphInstantiate(ctypes.byref(e), g, 0), "cudaGraphInstantiate")
            self.graphs[bs] = e.value
        self.truth["graphs"] = private.reserved

    def decode(self, steps):
        exe = self.graphs[max(BATCHES)]
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            cu.check(cu.rt.cudaGraphLaunch(exe, self.stream), "cudaGraphLaunch")
            cu.check(cu.rt.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")
            times.append(time.perf_counter() - t0)
        return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--bench", action="store_true")
    args = ap.parse_args()
    cu.check(cu.rt.cudaSetDevice(0), "cudaSetDevice")
    e = TinyEngine()
    # No pack knows this engine and its pool is capped below half of the free memory, and the
    # stand-in's loader has no torch frames: the kit says what they are (explicit tags).
    with tag("weights"):
        e.phase("weights", e.load_weights)
    with tag("kv_pool"):
        e.phase("kv_pool", e.init_memory_pool)
    e.phase("other", e.static_buffers)
    e.warm_up()
    e.capture_graphs()
    times = e.decode(args.steps)
    fields = dict(pid=os.getpid(), device=0, step_s=times)
    if not args.bench:
        fields.update(truth={k: e.truth[k] for k in ("weights", "kv_pool", "graphs")}, other=e.truth["other"],
                      param_bytes=e.param_bytes, kv_tokens=e.tokens,
                      functions=["load_weights", "init_memory_pool", "capture_graphs"])
    kit(**fields)
    finish()


if __name__ == "__main__":
    main()
