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

The runtime is loaded through ctypes the way SGLang's CudaRTLibrary does: ``libcudart.so.12``
by name, then the mapped file found in /proc/self/maps is opened again. Python standard
library only. Exit status: 0, or 1 when a rank failed (an out-of-memory message is printed).
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys

MIB = 1 << 20
ALIGN = 2 * MIB
cudaMemcpyHostToDevice = 1
cudaIpcMemLazyEnablePeerAccess = 1
cudaStreamCaptureModeGlobal = 0
cudaErrorMemoryAllocation = 2
# Per tensor copy chunk: the host buffer stays small however large the model is.
HOST_CHUNK = 4 * MIB
GRAPH_BATCH_SIZES = (1, 8, 32)


class cudaIpcMemHandle_t(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 64)]


class CudaError(RuntimeError):
    def __init__(self, call, code, text):
        super().__init__(f"{call}: CUDA error {code}: {text}")
        self.code = code


_P = ctypes.POINTER
_VP = ctypes.c_void_p
_SZ = ctypes.c_size_t
# name -> argtypes (all return cudaError_t except cudaGetErrorString).
SIGNATURES = {
    "cudaSetDevice": [ctypes.c_int],
    "cudaGetDeviceCount": [_P(ctypes.c_int)],
    "cudaMalloc": [_P(_VP), _SZ],
    "cudaFree": [_VP],
    "cudaMemcpy": [_VP, _VP, _SZ, ctypes.c_int],
    "cudaMemGetInfo": [_P(_SZ), _P(_SZ)],
    "cudaIpcGetMemHandle": [_P(cudaIpcMemHandle_t), _VP],
    "cudaIpcOpenMemHandle": [_P(_VP), cudaIpcMemHandle_t, ctypes.c_uint],
    "cudaIpcCloseMemHandle": [_VP],
    "cudaDeviceEnablePeerAccess": [ctypes.c_int, ctypes.c_uint],
    "cudaStreamCreate": [_P(_VP)],
    "cudaStreamDestroy": [_VP],
    "cudaStreamBeginCapture": [_VP, ctypes.c_int],
    "cudaStreamEndCapture": [_VP, _P(_VP)],
    "cudaMallocAsync": [_P(_VP), _SZ, _VP],
    "cudaGraphInstantiate": [_P(_VP), _VP, ctypes.c_ulonglong],
    "cudaGraphExecDestroy": [_VP],
    "cudaGraphDestroy": [_VP],
    "cudaDeviceSynchronize": [],
}


def find_loaded_library(prefix):
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith(prefix):
                return path
    return None


class CudaRT:
    """The subset of the runtime the simulation calls, each call checked."""

    def __init__(self):
        ctypes.CDLL("libcudart.so.12")
        path = find_loaded_library("libcudart")
        if path is None:
            raise RuntimeError("libcudart is not loaded in this process")
        self.lib = ctypes.CDLL(path)
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p
        self.lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        for name, argtypes in SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes

    def call(self, name, *args):
        code = getattr(self.lib, name)(*args)
        if code != 0:
            raise CudaError(name, code, self.lib.cudaGetErrorString(code).decode())

    def malloc(self, size):
        p = _VP()
        self.call("cudaMalloc", ctypes.byref(p), size)
        return p

    def mem_get_info(self):
        free, total = _SZ(), _SZ()
        self.call("cudaMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value


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


def load_weights(rt, model_mib):
    host = ctypes.create_string_buffer(HOST_CHUNK)
    tensors = []
    for _name, size in weight_shapes(model_mib):
        p = rt.malloc(size)
        for off in range(0, size, HOST_CHUNK):
            rt.call("cudaMemcpy", _VP(p.value + off), ctypes.cast(host, _VP), min(HOST_CHUNK, size - off),
                    cudaMemcpyHostToDevice)
        tensors.append(p)
    return tensors


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


def capture_graphs(rt, custom):
    stream = _VP()
    rt.call("cudaStreamCreate", ctypes.byref(stream))
    rt.call("cudaStreamBeginCapture", stream, cudaStreamCaptureModeGlobal)
    pool = []
    for _ in range(2):
        p = _VP()
        rt.call("cudaMallocAsync", ctypes.byref(p), 32 * MIB, stream)
        pool.append(p)
    graph = _VP()
    rt.call("cudaStreamEndCapture", stream, ctypes.byref(graph))
    execs = []
    for _ in GRAPH_BATCH_SIZES:
        e = _VP()
        rt.call("cudaGraphInstantiate", ctypes.byref(e), graph, 0)
        execs.append(e)
    if custom:
        # register_graph_buffers: the graph's all-reduce inputs are exported to the peers.
        buf = rt.malloc(24 * MIB)
        h = cudaIpcMemHandle_t()
        rt.call("cudaIpcGetMemHandle", ctypes.byref(h), buf)
    return len(execs)


def worker(args):
    rank, custom = args.worker, args.allreduce == "custom"
    set_title(f"sglang::scheduler_TP{rank}")  # as SGLang's run_scheduler_process does
    rt = CudaRT()
    rt.call("cudaSetDevice", rank)
    free, total = rt.mem_get_info()
    say(rank, f"GPU {rank}: {gib(free)} free of {gib(total)}")
    comm = [rt.malloc(32 * MIB) for _ in range(4)]  # NCCL channels and work buffers
    handles = []
    if custom:
        bufs = [rt.malloc(8 * MIB) for _ in range(2)]
        for b in bufs:
            h = cudaIpcMemHandle_t()
            rt.call("cudaIpcGetMemHandle", ctypes.byref(h), b)
            handles.append(h)
        peers = barrier("handles", [bytes(h).hex() for h in handles])
    load_weights(rt, args.model_mib)
    available, total = rt.mem_get_info()
    rest = available - int(total * (1 - args.mem_fraction_static))
    say(rank, f"weights loaded; available {gib(available)}, KV pool gets {gib(rest)}"
              f" (mem_fraction_static={args.mem_fraction_static})")
    if custom:
        barrier("probed")
        open_peers(rt, rank, peers)
        barrier("mapped")
    half = max(rest, 0) // 2 // ALIGN * ALIGN
    try:
        kv = [rt.malloc(half), rt.malloc(half)]
    except CudaError as e:
        if e.code != cudaErrorMemoryAllocation:
            raise
        free, _ = rt.mem_get_info()
        # One write, so that the ranks' messages do not interleave.
        sys.stderr.write(f"[rank {rank}] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                         f"{gib(half)}. GPU {rank} has {gib(free)} free. (KV cache pool)\n")
        sys.stderr.flush()
        return 1
    graphs = capture_graphs(rt, custom)
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

    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(r)] + common,
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
