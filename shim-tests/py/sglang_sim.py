#!/usr/bin/env python3
"""An SGLang-like server start-up on the simulated CUDA stack: the demo culedger exists for.

The launcher process opens a context on GPU 0 (as SGLang's main process does when it checks
the GPU), then starts one worker process per tensor-parallel rank, with the rank environment
of a torch.distributed launcher (RANK, LOCAL_RANK, WORLD_SIZE). Each rank names itself
``sglang::scheduler_TP<rank>`` the way SGLang does with setproctitle, then, like SGLang's
ModelRunner:

  1. selects its GPU (cudaSetDevice(rank)) and reads the free memory (cudaMemGetInfo);
  2. sets up communication: NCCL-like buffers, and with ``--allreduce custom`` SGLang's custom
     all-reduce: 2 x 8 MiB buffers whose IPC handles are exported and exchanged with the other
     ranks through the launcher (a barrier);
  3. loads the weights: cudaMalloc per tensor + cudaMemcpy host-to-device (from one small host
     buffer, copied chunk by chunk);
  4. profiles the free memory again and sizes the KV pool as SGLang does:
     ``rest = available_now - total_gpu_memory * (1 - mem_fraction_static)``;
  5. (custom all-reduce) opens the peers' buffers with cudaIpcOpenMemHandle and enables peer
     access: this happens after the probe, so the driver memory those mappings cost is not in
     the number the pool was sized from;
  6. allocates the KV pool (k_buffer and v_buffer, half each);
  7. captures a CUDA graph (cudaStreamBeginCapture, cudaMallocAsync in the capture,
     cudaStreamEndCapture, cudaGraphInstantiate per batch size) and, with the custom
     all-reduce, exports the graph buffers;
  8. reads the free memory a last time and exits.

With a thin reserve (``--mem-fraction-static`` close to 1) and a noticeable peer-mapping cost
(``FAKECUDA_PEER_MIB``), the custom all-reduce configuration runs out of memory in step 6 while
the NCCL one passes: ``scripts/demo.sh`` sets those parameters.

The runtime is loaded through ctypes the way SGLang's CudaRTLibrary does (``torch/__init__.py``
beside this file plays PyTorch's CUDA layer), and each allocation is made by a function named
after the SGLang code that makes it (``ModelRunner.load_model``, ``MHATokenToKVPool._create_buffers``,
``CustomAllreduce.__init__``, ``CudaGraphRunner.capture``, ...), so that culedger's call sites
name them. Workers are started with ``$CULEDGER_SIM_PYTHON`` when set (an interpreter that needs
a launcher), else ``sys.executable``. Python standard library only. Exit status: 0, or 1 when a
rank failed (an out-of-memory message is printed).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys

from torch import CudaError, CudaRT, cudaErrorMemoryAllocation, cudaIpcMemHandle_t, cudaMemcpyHostToDevice

MIB = 1 << 20
ALIGN = 2 * MIB
cudaIpcMemLazyEnablePeerAccess = 1
cudaStreamCaptureModeGlobal = 0
# Per tensor copy chunk: the host buffer stays small however large the model is.
HOST_CHUNK = 4 * MIB
GRAPH_BATCH_SIZES = (1, 8, 32)
_VP = ctypes.c_void_p


def set_title(title):
    """What setproctitle (which SGLang and vLLM use to name their workers) does on Linux:
    overwrite the argument area of the process with the title and NUL padding, so that
    /proc/self/cmdline (and ps) show the title. The area's bounds come from /proc/self/stat
    (arg_start, arg_end: fields 48 and 49); Python keeps its own copy of argv."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    arg_start, arg_end = int(fields[45]), int(fields[46])
    data = title.encode()[: arg_end - arg_start - 1]
    ctypes.memmove(arg_start, data + b"\0" * (arg_end - arg_start - len(data)), arg_end - arg_start)


def say(rank, text):
    who = "launcher" if rank is None else f"rank {rank}"
    print(f"[{who}] {text}", flush=True)


def gib(n):
    return f"{n / (1 << 30):.2f} GiB"


def weight_shapes(model_mib):
    """(name, bytes) of one rank's tensors: embedding and head 1/16 each, 32 equal layers."""
    total = model_mib * MIB
    edge = total // 16 // ALIGN * ALIGN
    layer = (total - 2 * edge) // 32 // ALIGN * ALIGN
    return [("embed_tokens", edge), ("lm_head", edge)] + [(f"layers.{i}", layer) for i in range(32)]


class ModelRunner:
    """sglang/srt/model_executor/model_runner.py"""

    def __init__(self, rt):
        self.rt = rt

    def load_model(self, model_mib):
        host = ctypes.create_string_buffer(HOST_CHUNK)
        tensors = []
        for _name, size in weight_shapes(model_mib):
            p = self.rt.malloc(size)
            for off in range(0, size, HOST_CHUNK):
                self.rt.call("cudaMemcpy", _VP(p.value + off), ctypes.cast(host, _VP), min(HOST_CHUNK, size - off),
                             cudaMemcpyHostToDevice)
            tensors.append(p)
        return tensors

    def get_available_gpu_memory(self):
        return self.rt.mem_get_info()


class PyNcclCommunicator:
    """sglang/srt/distributed/device_communicators/pynccl.py: NCCL channels and work buffers."""

    def __init__(self, rt):
        self.buffers = [rt.malloc(32 * MIB) for _ in range(4)]


class CustomAllreduce:
    """sglang/srt/distributed/device_communicators/custom_all_reduce.py"""

    def __init__(self, rt):
        self.rt = rt
        self.buffers = [rt.malloc(8 * MIB) for _ in range(2)]
        self.handles = []
        for b in self.buffers:
            h = cudaIpcMemHandle_t()
            rt.call("cudaIpcGetMemHandle", ctypes.byref(h), b)
            self.handles.append(h)

    def register_graph_buffers(self):
        # The graph's all-reduce inputs are exported to the peers.
        buf = self.rt.malloc(24 * MIB)
        h = cudaIpcMemHandle_t()
        self.rt.call("cudaIpcGetMemHandle", ctypes.byref(h), buf)
        return buf


class MHATokenToKVPool:
    """sglang/srt/mem_cache/memory_pool.py"""

    def __init__(self, rt, size):
        self.rt = rt
        self._create_buffers(size)

    def _create_buffers(self, size):
        self.k_buffer = self.rt.malloc(size)
        self.v_buffer = self.rt.malloc(size)


def barrier(name, payload=None):
    """Waits until every rank reached `name` (through the launcher); returns their payloads.

    The custom all-reduce needs one to exchange handles; the others make the order of events
    across GPUs deterministic (all probes before any peer mapping, all mappings before any KV
    allocation), so that two runs of the demo produce the same numbers."""
    print(f"BARRIER {name} {json.dumps(payload)}", flush=True)
    line = sys.stdin.readline()
    if not line.startswith(f"GO {name} "):
        raise RuntimeError(f"barrier {name}: the launcher answered {line!r}")
    return {int(r): v for r, v in json.loads(line.split(" ", 2)[2]).items()}


def open_peers(rt, rank, peers):
    """Custom all-reduce: map every peer's buffers and enable peer access to its GPU."""
    opened = []
    for peer, handles in sorted(peers.items()):
        if peer == rank:
            continue
        for hexed in handles:
            p = _VP()
            handle = cudaIpcMemHandle_t.from_buffer_copy(bytes.fromhex(hexed))
            rt.call("cudaIpcOpenMemHandle", ctypes.byref(p), handle, cudaIpcMemLazyEnablePeerAccess)
            opened.append(p)
        rt.call("cudaDeviceEnablePeerAccess", peer, 0)
    return opened


class CudaGraphRunner:
    """sglang/srt/model_executor/cuda_graph_runner.py"""

    def __init__(self, rt, allreduce):
        self.rt = rt
        self.allreduce = allreduce

    def capture(self):
        rt = self.rt
        stream = _VP()
        rt.call("cudaStreamCreate", ctypes.byref(stream))
        rt.call("cudaStreamBeginCapture", stream, cudaStreamCaptureModeGlobal)
        pool = [rt.malloc_async(32 * MIB, stream) for _ in range(2)]
        graph = _VP()
        rt.call("cudaStreamEndCapture", stream, ctypes.byref(graph))
        execs = []
        for _ in GRAPH_BATCH_SIZES:
            e = _VP()
            rt.call("cudaGraphInstantiate", ctypes.byref(e), graph, 0)
            execs.append(e)
        if self.allreduce is not None:
            self.allreduce.register_graph_buffers()
        del pool
        return len(execs)


def worker(args):
    rank, custom = args.worker, args.allreduce == "custom"
    set_title(f"sglang::scheduler_TP{rank}")  # as SGLang's run_scheduler_process does
    rt = CudaRT()
    rt.call("cudaSetDevice", rank)
    runner = ModelRunner(rt)
    free, total = runner.get_available_gpu_memory()
    say(rank, f"GPU {rank}: {gib(free)} free of {gib(total)}")
    comm = PyNcclCommunicator(rt)
    allreduce = None
    if custom:
        allreduce = CustomAllreduce(rt)
        peers = barrier("handles", [bytes(h).hex() for h in allreduce.handles])
    runner.load_model(args.model_mib)
    available, total = runner.get_available_gpu_memory()
    rest = available - int(total * (1 - args.mem_fraction_static))
    say(rank, f"weights loaded; available {gib(available)}, KV pool gets {gib(rest)}"
              f" (mem_fraction_static={args.mem_fraction_static})")
    if custom:
        barrier("probed")
        open_peers(rt, rank, peers)
        barrier("mapped")
    half = max(rest, 0) // 2 // ALIGN * ALIGN
    try:
        kv = MHATokenToKVPool(rt, half)
    except CudaError as e:
        if e.code != cudaErrorMemoryAllocation:
            raise
        free, _ = rt.mem_get_info()
        # One write, so that the ranks' messages do not interleave.
        sys.stderr.write(f"[rank {rank}] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                         f"{gib(half)}. GPU {rank} has {gib(free)} free. (KV cache pool)\n")
        sys.stderr.flush()
        return 1
    graphs = CudaGraphRunner(rt, allreduce).capture()
    free, _ = rt.mem_get_info()
    say(rank, f"KV pool {gib(2 * half)}, {graphs} graphs captured; {gib(free)} free. Ready.")
    del comm, kv
    return 0


# The barriers a custom all-reduce rank passes, in order (see `barrier`).
CUSTOM_BARRIERS = ("handles", "probed", "mapped")


def release(procs, name, alive):
    """Relays the ranks' output until each living one reached barrier `name`, then lets them go
    on with every rank's payload. A rank that exits before is dropped from `alive`."""
    payloads = {}
    for r, p in enumerate(procs):
        if r not in alive:
            continue
        for line in p.stdout:
            if line.startswith(f"BARRIER {name} "):
                payloads[r] = json.loads(line.split(" ", 2)[2])
                break
            sys.stdout.write(line)
        else:
            alive.discard(r)
    for r in sorted(alive):
        try:
            procs[r].stdin.write(f"GO {name} {json.dumps(payloads)}\n")
            procs[r].stdin.flush()
        except BrokenPipeError:  # died meanwhile: its exit status tells
            alive.discard(r)


def launcher(args):
    rt = CudaRT()
    rt.call("cudaSetDevice", 0)
    free, total = rt.mem_get_info()
    say(None, f"GPU 0 has {gib(free)} free of {gib(total)}; starting {args.tp} ranks ({args.allreduce} all-reduce)")
    common = ["--tp", str(args.tp), "--allreduce", args.allreduce, "--model-mib", str(args.model_mib),
              "--mem-fraction-static", str(args.mem_fraction_static)]
    def env(r):
        """The rank environment a torch.distributed launcher (torchrun) gives its workers."""
        return dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.tp))

    python = os.environ.get("CULEDGER_SIM_PYTHON") or sys.executable
    procs = [subprocess.Popen([python, os.path.abspath(__file__), "--worker", str(r)] + common,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env(r))
             for r in range(args.tp)]
    alive = set(range(args.tp))
    for name in CUSTOM_BARRIERS if args.allreduce == "custom" else ():
        release(procs, name, alive)
    failed = []
    for r, p in enumerate(procs):
        for line in p.stdout:
            sys.stdout.write(line)
        if p.wait() != 0:
            failed.append(r)
    if failed:
        say(None, f"rank(s) {', '.join(map(str, failed))} failed: server start-up aborted")
        return 1
    say(None, "server ready")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks (one GPU each)")
    ap.add_argument("--allreduce", choices=["nccl", "custom"], default="nccl")
    ap.add_argument("--model-mib", type=int, default=4096, help="weights per rank, MiB")
    ap.add_argument("--mem-fraction-static", type=float, default=0.88)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        return worker(args) if args.worker is not None else launcher(args)
    except CudaError as e:
        print(f"sglang_sim: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
