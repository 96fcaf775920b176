"""Ground truth of the simulated engines (not part of any engine's module tree).

Every device memory range the simulated process takes from CUDA is recorded here with the
category it belongs to by definition (docs/categories.md), whichever library took it:

- segments of the caching allocator (libc10_cuda.so): the category of the request that made
  the allocator create the segment (what a hook sees is the segment, not the tensor);
- NCCL-like buffers (libnccl.so.2) and ranges the engine code allocates directly
  (``CudaRTLibrary.cudaMalloc``): the category current when they were made.

A range exported to peers ends up ``ipc`` (the category definitions put exported buffers
there), over its whole life. Live and peak bytes per category are computed at exit from the
full history with these final categories, the way culedger's report defines them.

Each record also keeps what a call-site recorder would see when the range was allocated (the
Python frames innermost first with qualified names, and the native library that called
CUDA), what was copied into it from host memory, and the free-memory queries: enough to
classify the history with culedger's rules offline (shim-tests/scenarios/tests/engines.rs).

The engine code marks categories with ``truth.category("weights")``; the sim's torch passes
the current one to the allocator. With ``ENGINE_SIM_TRUTH_DIR`` set, every process that made a
record writes ``truth-<pid>.json`` there at exit.
"""
import atexit
import contextlib
import ctypes
import json
import os
import sys

CATEGORIES = ("weights", "kv_pool", "ipc", "graphs", "comm", "other")
APIS = ("cudaMalloc", "cuMemCreate", "cuMemAlloc_v2")
# The native libraries that call CUDA for each source (innermost first).
NATIVE = {
    "c10": ["libc10_cuda.so"],
    "c10-cumem": ["cumem_allocator.abi3.so", "libc10_cuda.so"],
    "nccl": ["libnccl.so.2"],
    "direct": [],
}
FRAMES_KEPT = 64


class Event(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("dev", ctypes.c_int32), ("tag", ctypes.c_int32),
                ("api", ctypes.c_int32), ("base", ctypes.c_uint64), ("size", ctypes.c_uint64)]


def _qualname(code):
    return getattr(code, "co_qualname", code.co_name)


class Truth:
    def __init__(self):
        self.stack = ["other"]
        self.seq = 0
        self.records = []
        self.live = {}  # base address -> record index
        self.probes = []
        self.sources = []  # (name, drain function)
        self.capturing = set()  # devices with an active capture
        self.role = os.path.basename(sys.argv[0]) if sys.argv else "?"
        self.status = "ok"
        self._buf = (Event * 256)()
        atexit.register(self.write)

    # ---- categories -------------------------------------------------------------------
    @contextlib.contextmanager
    def category(self, name):
        assert name in CATEGORIES, name
        self.stack.append(name)
        try:
            yield
        finally:
            self.stack.pop()

    def current(self):
        return self.stack[-1]

    def tag(self):
        return CATEGORIES.index(self.current())

    # ---- records ----------------------------------------------------------------------
    def add_source(self, name, drain):
        """`drain(buf, max) -> n` fills `buf` with Events; `name` picks the native frames."""
        self.sources.append((name, drain))

    def drain(self, skip=1):
        """Apply what the native libraries logged since the last call. The Python stack of the
        caller (`skip` frames up) is the call site of the allocations just made."""
        site = None
        for name, fn in self.sources:
            while True:
                n = fn(self._buf, len(self._buf))
                for i in range(n):
                    e = self._buf[i]
                    if site is None and e.kind == 1:
                        site = self._site(skip + 1)
                    self._apply(name, e, site)
                if n < len(self._buf):
                    break

    def _site(self, depth):
        """Frames from `depth` levels above this one (1: the caller) outwards."""
        frames = []
        f = sys._getframe(depth)
        while f is not None and len(frames) < FRAMES_KEPT:
            frames.append([os.path.abspath(f.f_code.co_filename), _qualname(f.f_code)])
            f = f.f_back
        return frames

    def _apply(self, source, e, site):
        self.seq += 1
        if e.kind == 1:
            cat = CATEGORIES[e.tag] if source.startswith("c10") else self.current()
            if source == "c10" and e.api == 1:
                source = "c10-cumem"
            self.live[e.base] = len(self.records)
            self.records.append({
                "seq": self.seq, "dev": e.dev, "bytes": e.size, "category": cat, "api": APIS[e.api],
                "exported": False, "captured": e.dev in self.capturing, "h2d_bytes": 0, "freed_seq": None,
                "python": site or [], "native": NATIVE.get(source, []), "base": e.base,
            })
        else:
            i = self.live.pop(e.base, None)
            if i is not None:
                self.records[i]["freed_seq"] = self.seq

    def direct_alloc(self, dev, base, size, api="cudaMalloc"):
        """A range the engine code took from the runtime itself (not through the allocator)."""
        e = Event(1, dev, self.tag(), APIS.index(api), base, size)
        self._apply("direct", e, self._site(2))

    def direct_free(self, base):
        self._apply("direct", Event(2, 0, 0, 0, base, 0), None)

    def _containing(self, ptr):
        for base, i in self.live.items():
            r = self.records[i]
            if base <= ptr < base + r["bytes"]:
                return r
        return None

    def h2d(self, ptr, nbytes):
        r = self._containing(ptr)
        if r is not None:
            r["h2d_bytes"] += nbytes

    def export(self, ptr):
        r = self._containing(ptr)
        if r is not None:
            r["exported"] = True

    def probe(self, dev, free, total):
        self.seq += 1
        self.probes.append({"seq": self.seq, "dev": dev, "free": free, "total": total})

    # ---- the result -------------------------------------------------------------------
    @staticmethod
    def final_category(r):
        return "ipc" if r["exported"] else r["category"]

    def summary(self):
        """Per device: live and peak bytes, total and per category (final categories)."""
        out = {}
        for dev in sorted({r["dev"] for r in self.records}):
            changes = []
            for r in self.records:
                if r["dev"] != dev:
                    continue
                cat = self.final_category(r)
                changes.append((r["seq"], cat, r["bytes"]))
                if r["freed_seq"] is not None:
                    changes.append((r["freed_seq"], cat, -r["bytes"]))
            changes.sort(key=lambda c: (c[0], -c[2]))
            live = {c: 0 for c in CATEGORIES}
            peak = dict(live)
            total = total_peak = 0
            for i, (seq, cat, delta) in enumerate(changes):
                live[cat] += delta
                total += delta
                if i + 1 == len(changes) or changes[i + 1][0] != seq:
                    for c in CATEGORIES:
                        peak[c] = max(peak[c], live[c])
                    total_peak = max(total_peak, total)
            out[str(dev)] = {"live": total, "peak": total_peak,
                             "categories": {c: {"live": live[c], "peak": peak[c]} for c in CATEGORIES}}
        return out

    def write(self):
        d = os.environ.get("ENGINE_SIM_TRUTH_DIR")
        if not d or (not self.records and not self.probes):
            return
        try:
            self.drain()
        except Exception:  # interpreter shutdown: the libraries may be gone
            pass
        doc = {"pid": os.getpid(), "role": self.role, "status": self.status, "devices": self.summary(),
               "records": self.records, "probes": self.probes}
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".truth-{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, os.path.join(d, f"truth-{os.getpid()}.json"))


truth = Truth()


def say(line):
    """One line on stdout in a single write: the processes of a launch share the terminal."""
    sys.stdout.flush()
    os.write(1, (line + "\n").encode())
