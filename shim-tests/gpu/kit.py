#!/usr/bin/env python3
"""culedger's GPU validation kit: runs workloads under culedger and compares its reports with what
the programs themselves know (PyTorch's allocator statistics, mem_get_info, nvidia-smi, the
script's own accounting). One line per check: PASS, FAIL or SKIP with the figures.

    kit.py --out REPORT_DIR --lib libculedger.so [--cli culedger] [--self-test]

Started by validate.sh (which finds the library and the CLI). On a GPU machine the workloads are
`workloads/*.py` (PyTorch, CuPy, JAX, nvidia-smi). With --self-test they run on the simulated
CUDA stack of shim-tests: when real PyTorch is installed where the framework tests find it
(`target/frameworks/site`, or KIT_FRAMEWORKS_SITE), the very same `workloads/*.py` with that
site on PYTHONPATH (only nvidia-smi, which needs a GPU, is the stand-in `sim/smi.py`);
otherwise the stand-ins `sim/*.py`, which do the same through ctypes. Either way every
comparison below runs, and is checked, without a GPU. Standard library only; Python 3.8+.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
BUDGET_S = 300  # the whole kit must finish in under five minutes
CATEGORY_REL = 0.01  # categories within 1% + 2 MiB of the script's own accounting
CATEGORY_ABS = 2 * MiB
SMI_REL = 0.01  # culedger's device-used within 1% (of the device) of nvidia-smi's
OVERHEAD_LIMIT = 0.01  # decode-step time under culedger at most 1% above the plain run


def gib(n):
    return "null" if n is None else f"{n / (1 << 30):.3f} GiB"


def mib(n):
    return "null" if n is None else f"{n / MiB:.2f} MiB"


class Result:
    """One check's outcome."""

    def __init__(self, cid, name, status, figures, **details):
        assert status in ("PASS", "FAIL", "SKIP"), status
        self.cid, self.name, self.status, self.figures, self.details = cid, name, status, figures, details

    def line(self):
        return f"{self.status:4}  {self.cid:3} {self.name}: {self.figures}"

    def as_json(self):
        return {"id": self.cid, "name": self.name, "status": self.status, "figures": self.figures,
                "details": self.details}


# ---------------------------------------------------------------------------------------------
# Reading reports (culedger/1, docs/schema.md). Fields added by later culedger versions are
# looked up defensively: a report without them makes the check SKIP, never FAIL.
# ---------------------------------------------------------------------------------------------

def load_reports(directory):
    out = []
    if not os.path.isdir(directory):
        return out
    for name in sorted(os.listdir(directory)):
        if name.startswith("culedger-") and name.endswith(".json") and name != "culedger-summary.json":
            try:
                with open(os.path.join(directory, name)) as f:
                    r = json.load(f)
            except (OSError, ValueError):
                continue
            if r.get("schema") == "culedger/1":
                out.append(r)
    return out


def report_of(reports, pid):
    for r in reports:
        if r.get("process", {}).get("pid") == pid:
            return r
    return None


def device(report, index=0):
    for d in (report or {}).get("devices", []):
        if d.get("index") == index:
            return d
    return None


def has_rules(report):
    """Categories come from rules (culedger with [5]): some site or allocation names its rule."""
    rows = list(report.get("sites") or [])
    for d in report.get("devices", []):
        rows += list(d.get("sites") or []) + list(d.get("top_allocations") or [])
    return any(isinstance(r, dict) and "rule" in r for r in rows)


def site_table(report):
    """Top-level call sites (culedger with [4]): {id: site}, or None when the report has none."""
    sites = report.get("sites")
    if not isinstance(sites, list):
        return None
    return {s.get("id"): s for s in sites if isinstance(s, dict)}


# ---------------------------------------------------------------------------------------------
# The comparisons. Pure functions of (report, ground truth): the self-test runs them on the
# simulated stack and also feeds each one wrong ground truth, which must FAIL.
# ---------------------------------------------------------------------------------------------

def compare_tracked(cid, name, report, dev_index, expected, what):
    """culedger's tracked bytes on a device equal the program's own figure exactly."""
    d = device(report, dev_index)
    if d is None:
        return Result(cid, name, "FAIL", f"no device {dev_index} in the report", expected=expected)
    tracked = d.get("live_bytes")
    ok = tracked == expected
    rel = "==" if ok else "!="
    return Result(cid, name, "PASS" if ok else "FAIL", f"tracked {tracked} B {rel} {what} {expected} B ({mib(expected)})",
                  tracked=tracked, expected=expected)


def compare_probe(cid, name, report, dev_index, free, total):
    """mem_get_info was recorded as a probe with exactly the numbers the program was told."""
    d = device(report, dev_index)
    probes = (d or {}).get("probes") or []
    hit = [p for p in probes if p.get("free_bytes") == free and p.get("total_bytes") == total and p.get("error") == 0]
    if hit:
        return Result(cid, name, "PASS", f"probe {hit[-1].get('api')} free {free} total {total} as told",
                      free=free, total=total, probes=len(probes))
    seen = [(p.get("api"), p.get("free_bytes"), p.get("total_bytes")) for p in probes[-4:]]
    return Result(cid, name, "FAIL", f"no probe with free {free} total {total}; last probes {seen}",
                  free=free, total=total)


def device_used(report, dev_index):
    """Device used as culedger knows it: total minus free of the last successful probe."""
    d = device(report, dev_index)
    probes = [p for p in (d or {}).get("probes") or [] if p.get("error") == 0 and p.get("free_bytes") is not None]
    if not probes or probes[-1].get("total_bytes") is None:
        return None, None
    last = probes[-1]
    return last["total_bytes"] - last["free_bytes"], last["total_bytes"]


def compare_used(cid, name, used, smi_used, total, rel=SMI_REL):
    """culedger's device-used against nvidia-smi's, within `rel` of the device's memory."""
    if used is None or smi_used is None or not total:
        return Result(cid, name, "FAIL", f"missing figure: culedger {used}, nvidia-smi {smi_used}, total {total}")
    diff = abs(used - smi_used)
    ok = diff <= rel * total
    return Result(cid, name, "PASS" if ok else "FAIL",
                  f"culedger {gib(used)} vs nvidia-smi {gib(smi_used)}: off by {mib(diff)} "
                  f"({100.0 * diff / total:.3f}% of {gib(total)}, limit {100 * rel:.0f}%)",
                  culedger=used, smi=smi_used, total=total)


# Categories that need [5]'s rules; `graphs` (allocations during stream capture) and `ipc`
# (exported allocations) come from the hooks themselves in every culedger.
RULE_CATEGORIES = ("weights", "kv_pool", "comm")


def compare_categories(cid, name, report, dev_index, truth, rel=CATEGORY_REL, slack=CATEGORY_ABS):
    """Per-category live bytes within rel + slack of the script's own accounting. Without category
    rules in the report (culedger before [5]) only the hook-made categories are compared."""
    rules = has_rules(report)
    compared = {k: v for k, v in truth.items() if rules or k not in RULE_CATEGORIES}
    left_out = sorted(set(truth) - set(compared))
    note = f"; {', '.join(left_out)} not compared: the report has no category rules (culedger before [5])" if left_out else ""
    if not compared:
        return Result(cid, name, "SKIP", "the report has no category rules (culedger before [5]); truth "
                      + ", ".join(f"{k} {mib(v)}" for k, v in sorted(truth.items())), truth=truth)
    cats = (device(report, dev_index) or {}).get("categories") or {}
    parts, ok = [], True
    for cat, want in sorted(compared.items()):
        got = (cats.get(cat) or {}).get("live_bytes")
        good = got is not None and abs(got - want) <= rel * want + slack
        ok = ok and good
        parts.append(f"{cat} {mib(got)} vs {mib(want)}{'' if good else ' (off)'}")
    return Result(cid, name, "PASS" if ok else "FAIL",
                  "; ".join(parts) + f" (limit {100 * rel:.0f}% + {mib(slack)})" + note,
                  truth=truth, compared=sorted(compared), got={c: (cats.get(c) or {}).get("live_bytes") for c in truth})


def python_frames(site):
    return [f for f in (site or {}).get("python") or [] if isinstance(f, dict)]


def compare_sites(cid, name, report, dev_index, script, functions):
    """Each of the script's functions is named by the call site of one of the largest allocations."""
    table = site_table(report)
    if table is None:
        return Result(cid, name, "SKIP", "the report has no call sites (culedger before [4]); expected "
                      + ", ".join(functions))
    named = set()
    d = device(report, dev_index) or {}
    # The largest allocations and the per-device sites holding the most live bytes.
    for a in list(d.get("top_allocations") or []) + list(d.get("sites") or []):
        for fr in python_frames(table.get(a.get("site"))):
            if str(fr.get("file", "")).endswith(script):
                named.add(str(fr.get("function", "")))
    found = {f: any(n == f or n.endswith("." + f) for n in named) for f in functions}
    ok = all(found.values())
    return Result(cid, name, "PASS" if ok else "FAIL",
                  ", ".join(f"{f} {'named' if v else 'MISSING'}" for f, v in found.items())
                  + f" (functions of {script} in the top allocations' sites: {sorted(named)[:12]})",
                  found=found)


def compare_ipc(cid, name, exporter, importer, dev_index, nbytes):
    """The exporter holds the shared buffer as ipc; the other process opened it as an import."""
    d, c = device(exporter, dev_index), device(importer, dev_index)
    if d is None or c is None:
        return Result(cid, name, "FAIL", f"missing report/device: exporter {d is not None}, importer {c is not None}")
    exported = (d.get("ipc") or {}).get("exported_bytes", 0)
    in_ipc = ((d.get("categories") or {}).get("ipc") or {}).get("live_bytes", 0)
    imported = (c.get("ipc") or {}).get("imported_bytes", 0)
    ok = exported >= nbytes and in_ipc >= nbytes and imported >= nbytes
    return Result(cid, name, "PASS" if ok else "FAIL",
                  f"tensor {mib(nbytes)}: exporter ipc {mib(in_ipc)} (exported {mib(exported)}), "
                  f"importer opened {mib(imported)}", exported=exported, ipc=in_ipc, imported=imported, bytes=nbytes)


def compare_comm(cid, name, report, dev_index):
    """NCCL's device buffers are in `comm`."""
    if not has_rules(report):
        return Result(cid, name, "SKIP", "the report has no category rules (culedger before [5])")
    d = device(report, dev_index) or {}
    comm = ((d.get("categories") or {}).get("comm") or {}).get("live_bytes", 0)
    ok = comm > 0
    return Result(cid, name, "PASS" if ok else "FAIL", f"comm {mib(comm)} of {mib(d.get('live_bytes'))} tracked",
                  comm=comm)


def compare_host(cid, name, report, minimum=1):
    """Pinned host memory was seen."""
    h = report.get("host") or {}
    peak = h.get("pinned_peak_bytes", 0)
    ok = peak >= minimum
    return Result(cid, name, "PASS" if ok else "FAIL", f"pinned host peak {mib(peak)} (live {mib(h.get('pinned_live_bytes'))})",
                  pinned_peak=peak)


def compare_seen(cid, name, report, dev_index, nbytes, path):
    """An allocation of the framework was seen on its own path: `runtime` (cuda*), `driver` (cu*),
    or `any` (either: CuPy 14's runtime module implements cudaMalloc over the driver's
    cuMemAlloc_v2, older CuPy calls NVIDIA's libcudart)."""
    d = device(report, dev_index)
    if d is None:
        return Result(cid, name, "FAIL", "no device in the report")
    allocs = d.get("top_allocations") or []
    on_path = [a for a in allocs if path == "any" or (str(a.get("api", "")).startswith("cuda")) == (path == "runtime")]
    live = sum(a.get("bytes", 0) for a in on_path)
    apis = sorted({str(a.get("api")) for a in allocs})
    ok = live >= nbytes
    return Result(cid, name, "PASS" if ok else "FAIL",
                  f"{mib(live)} live on the {'runtime or driver' if path == 'any' else path} path for a {mib(nbytes)} array "
                  f"(apis {apis})",
                  live=live, apis=apis)


def compare_overhead(cid, name, plain, ledgered, limit=OVERHEAD_LIMIT):
    """Median decode-step time under culedger against the plain run; `limit` None: report only."""
    if not plain or not ledgered:
        return Result(cid, name, "FAIL", "no step times")
    a, b = statistics.median(plain), statistics.median(ledgered)
    ratio = b / a if a > 0 else float("inf")
    figures = (f"median step {a * 1e6:.1f} us plain, {b * 1e6:.1f} us under culedger: ratio {ratio:.4f} "
               f"({len(plain)} + {len(ledgered)} steps)")
    if limit is None:
        return Result(cid, name, "PASS", figures + "; not enforced on the simulated stack", ratio=ratio)
    ok = ratio <= 1.0 + limit
    return Result(cid, name, "PASS" if ok else "FAIL", figures + f", target <= {1 + limit:.2f}", ratio=ratio)


# ---------------------------------------------------------------------------------------------
# Running workloads.
# ---------------------------------------------------------------------------------------------

class Workload:
    """A finished workload run: its pid, KIT figures, reports, output."""

    def __init__(self, rc, kit, reports, stdout, stderr, out_dir):
        self.rc, self.kit, self.reports, self.stdout, self.stderr, self.out_dir = rc, kit, reports, stdout, stderr, out_dir

    @property
    def report(self):
        return report_of(self.reports, self.kit.get("pid"))

    def problem(self, need_report=True):
        """None when the run succeeded (and left its report), else why not."""
        if self.rc != 0:
            last = [line.strip() for line in self.stderr.strip().splitlines() if line.strip()][-3:]
            return f"exit status {self.rc}: {' | '.join(last)} (log in {self.out_dir})"
        if "pid" not in self.kit:
            return f"no KIT line in its output: {self.stdout.strip()[-300:]}"
        if need_report and self.report is None:
            return f"no culedger report for pid {self.kit['pid']} in {self.out_dir}"
        return None


def parse_kit(text):
    kit = {}
    for line in text.splitlines():
        if line.startswith("KIT "):
            try:
                kit.update(json.loads(line[4:]))
            except ValueError:
                pass
    return kit


# torch's F.linear needs cuBLAS, whose cublasCreate fails on the simulated driver.
STAND_IN_ENGINE = ("cuBLAS (the engine's F.linear) does not initialise on the simulated driver "
                   "(cublasCreate: CUBLAS_STATUS_NOT_INITIALIZED)")


def frameworks_site():
    """The real frameworks' site-packages for the self-test (None: not installed)."""
    site = os.environ.get("KIT_FRAMEWORKS_SITE") or os.path.join(HERE, "..", "..", "target", "frameworks", "site")
    site = os.path.abspath(site)
    return site if os.path.isfile(os.path.join(site, "torch", "__init__.py")) else None


class Kit:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.sim = args.self_test
        self.lib = os.path.abspath(args.lib)
        self.cli = os.path.abspath(args.cli) if args.cli else None
        self.site = frameworks_site() if self.sim else None
        self.dir = os.path.join(HERE, "sim" if self.sim and not self.site else "workloads")
        # Real workloads the simulated driver cannot run yet, and why: they run as stand-ins.
        self.stand_ins = {"engine.py": STAND_IN_ENGINE} if self.site else {}
        self.python = args.python or sys.executable
        self.start = time.monotonic()
        self.results = []
        self.env = dict(os.environ)
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env.pop("LD_PRELOAD", None)
        if self.sim:
            self.machine = f"kit-selftest-{os.getpid()}"
            self.env.update({"FAKECUDA_MACHINE": self.machine, "FAKECUDA_DEVICES": "2", "FAKECUDA_TOTAL_MIB": "16384",
                             "FAKECUDA_CTX_MIB": "300", "FAKECUDA_GRAPH_MIB": "16", "FAKECUDA_IPC_OPEN_MIB": "2",
                             "FAKECUDA_DRIVER_VERSION": "13000"})
            if self.site:
                # torch 2.15 cu132 ships NVIDIA's runtime 13.2, which needs a 13.2 driver.
                self.env["FAKECUDA_DRIVER_VERSION"] = "13020"
                old = self.env.get("PYTHONPATH")
                self.env["PYTHONPATH"] = self.site + (os.pathsep + old if old else "")

    def left(self):
        return BUDGET_S - (time.monotonic() - self.start)

    def add(self, result):
        self.results.append(result)
        print(result.line(), flush=True)

    def run(self, tag, script, args=(), ledger=True, env=None, interact=None, timeout=120):
        """Runs a workload (under culedger unless `ledger` is False) with CULEDGER_OUT=REPORT_DIR/tag."""
        out_dir = os.path.join(self.out, tag)
        os.makedirs(out_dir, exist_ok=True)
        e = dict(self.env)
        e.update(env or {})
        if ledger:
            e.update({"LD_PRELOAD": self.lib, "CULEDGER_OUT": out_dir, "CULEDGER_FLUSH_MS": "200"})
        folder = os.path.join(HERE, "sim") if script in self.stand_ins else self.dir
        argv = [self.python, os.path.join(folder, script)] + list(args)
        timeout = max(5, min(timeout, self.left()))
        p = subprocess.Popen(argv, env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=out_dir)
        out_lines = []
        try:
            if interact:
                # The workload prints KIT-READY while it holds its memory; `interact` runs then.
                for line in p.stdout:
                    out_lines.append(line)
                    if line.strip() == "KIT-READY":
                        interact(parse_kit("".join(out_lines)))
                        p.stdin.write("go\n")
                        p.stdin.flush()
                        break
            rest, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            rest, err = p.communicate()
            err = f"timed out after {timeout:.0f} s\n{err}"
            p.returncode = 124
        stdout = "".join(out_lines) + (rest or "")
        with open(os.path.join(out_dir, f"{script}.log"), "a") as f:
            f.write(f"$ {' '.join(argv)}\n{stdout}\n--- stderr\n{err}\n")
        return Workload(p.returncode, parse_kit(stdout), load_reports(out_dir), stdout, err or "", out_dir)

    def failed(self, cids, name, w):
        for cid in cids:
            self.add(Result(cid, name, "FAIL", f"workload failed: {w.problem()}"))

    # ---- the checks ----------------------------------------------------------------------------

    def check_environment(self):
        w = self.run("env", "env.py", ledger=False, timeout=60)
        self.environment = w.kit
        parts = [f"{k} {w.kit[k]}" for k in ("gpu", "driver", "cuda", "torch", "python") if k in w.kit]
        print(f"INFO  env {'; '.join(parts) if parts else w.stderr.strip()[-300:]}", flush=True)

    def check_caching_allocator(self):
        # The async backend's memory_reserved is the pool's reservation; culedger tracks the live
        # cudaMallocAsync allocations, which is what memory_allocated counts.
        modes = [("1a", "native", "", "reserved", "memory_reserved"),
                 ("1b", "expandable", "expandable_segments:True", "reserved", "memory_reserved"),
                 ("1c", "async", "backend:cudaMallocAsync", "allocated", "memory_allocated")]
        for cid, mode, conf, key, figure in modes:
            name = f"torch caching allocator ({mode}{', ' + conf if conf else ''})"
            env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
            w = self.run(f"1-{mode}", "torch_alloc.py", ["--mode", mode], env=env)
            if w.problem():
                self.failed([cid], name, w)
                continue
            if self.site and os.environ.get("KIT_SABOTAGE"):
                # The self-test's control on real torch: the ground truth off by 512 bytes, as the
                # stand-in sim/torch_alloc.py misreports it under KIT_SABOTAGE=1.
                w.kit["reserved"] += 512
            self.add(compare_tracked(cid, name, w.report, w.kit["device"], w.kit[key], f"torch.cuda.{figure}()"))

    def check_mem_get_info(self):
        seen = {}

        def smi(kit):
            seen.update(self.device_used_smi(kit.get("device", 0)))

        w = self.run("2-meminfo", "meminfo.py", interact=smi)
        if w.problem():
            self.failed(["2a", "2b"], "mem_get_info", w)
            return
        dev = w.kit["device"]
        self.add(compare_probe("2a", "mem_get_info recorded as a probe", w.report, dev, w.kit["free"], w.kit["total"]))
        used, total = device_used(w.report, dev)
        self.add(compare_used("2b", "device used vs nvidia-smi", used, seen.get("used"), total))

    def device_used_smi(self, dev):
        """Device memory used as nvidia-smi reports it (the self-test's smi.py reads the fake
        driver's machine-wide figures the same way)."""
        if self.sim:
            argv = [self.python, os.path.join(HERE, "sim", "smi.py"), str(dev)]
        else:
            argv = ["nvidia-smi", f"--id={dev}", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"]
        try:
            text = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30).stdout
            used, total = (int(float(x)) for x in text.strip().splitlines()[0].split(","))
            return {"used": used * MiB, "smi_total": total * MiB}
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return {}

    def check_engine(self):
        w = self.run("3-engine", "engine.py", ["--steps", str(self.args.steps)])
        if w.problem():
            self.failed(["3a", "3b"], "tiny engine", w)
            self.engine = None
            return
        self.engine = w
        dev = w.kit["device"]
        self.add(compare_categories("3a", "tiny engine: categories weights/kv_pool/graphs", w.report, dev,
                                    w.kit["truth"]))
        self.add(compare_sites("3b", "tiny engine: call sites name the script's functions", w.report, dev,
                               "engine.py", w.kit["functions"]))

    def check_ipc(self):
        w = self.run("4-ipc", "ipc.py")
        if w.problem():
            self.failed(["4"], "CUDA IPC", w)
            return
        child = report_of(w.reports, w.kit.get("child_pid"))
        self.add(compare_ipc("4", "CUDA IPC via torch.multiprocessing: exporter ipc, importer import", w.report, child,
                             w.kit["device"], w.kit["bytes"]))

    def check_nccl(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        w = self.run("5-nccl", "nccl.py", env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        if w.problem():
            self.failed(["5a", "5b"], "single-rank NCCL", w)
            return
        self.add(compare_comm("5a", "single-rank NCCL all-reduce: buffers in comm", w.report, w.kit["device"]))
        self.add(compare_host("5b", "single-rank NCCL: pinned host memory in host", w.report))

    def check_frameworks(self):
        for cid, script, name, path in (("6a", "cupy_alloc.py", "CuPy allocation seen", "any"),
                                        ("6b", "jax_alloc.py", "JAX (XLA) allocation seen", "driver")):
            w = self.run(f"6-{script[:-3]}", script, timeout=90)
            if w.rc == 3:  # the framework is not installed
                self.add(Result(cid, name, "SKIP", w.stdout.strip().splitlines()[-1] if w.stdout.strip() else "not installed"))
                continue
            if w.problem():
                self.failed([cid], name, w)
                continue
            self.add(compare_seen(cid, name, w.report, w.kit["device"], w.kit["bytes"], path))

    def check_overhead(self):
        plain, ledgered = [], []
        for i in range(self.args.rounds):
            for ledger, into in ((False, plain), (True, ledgered)):
                w = self.run(f"7-overhead-{'culedger' if ledger else 'plain'}-{i}", "engine.py",
                             ["--bench", "--steps", str(self.args.steps)], ledger=ledger)
                if w.problem(need_report=ledger):
                    self.add(Result("7", "decode-loop overhead", "FAIL", f"workload failed: {w.problem(ledger)}"))
                    return
                into.extend(w.kit.get("step_s", []))
        self.add(compare_overhead("7", "decode-loop overhead under culedger", plain, ledgered,
                                  None if self.sim else OVERHEAD_LIMIT))

    def render_with_cli(self):
        if not self.cli:
            return
        for name in sorted(os.listdir(self.out)):
            d = os.path.join(self.out, name)
            if os.path.isdir(d) and load_reports(d):
                with open(os.path.join(d, "report.txt"), "w") as f:
                    subprocess.run([self.cli, "report", d], stdout=f, stderr=subprocess.STDOUT, env=self.env, timeout=60)

    # ---- the self-test's control: wrong ground truth must fail ----------------------------------

    def controls(self):
        """Every comparison, fed ground truth that is wrong by a little, must not PASS."""
        bad, tried = [], []

        def expect_not_pass(label, result):
            tried.append(label)
            if result.status == "PASS":
                bad.append(f"{label}: {result.figures}")

        by_tag = {}
        for name in os.listdir(self.out):
            reports = load_reports(os.path.join(self.out, name))
            if reports:
                by_tag[name] = reports
        native = by_tag.get("1-native", [None])[0]
        if native:
            live = device(native, 0)["live_bytes"]
            expect_not_pass("tracked + 1 B", compare_tracked("c", "", native, 0, live + 1, "x"))
            expect_not_pass("tracked on another device", compare_tracked("c", "", native, 1, live, "x"))
        meminfo = by_tag.get("2-meminfo", [None])[0]
        if meminfo:
            p = [p for p in device(meminfo, 0)["probes"] if p.get("free_bytes") is not None][-1]
            expect_not_pass("probe free + 1 B", compare_probe("c", "", meminfo, 0, p["free_bytes"] + 1, p["total_bytes"]))
            used, total = device_used(meminfo, 0)
            expect_not_pass("smi off by 1.5%", compare_used("c", "", used, used + int(0.015 * total), total))
        expect_not_pass("categories off by 3%", compare_categories("c", "", {"sites": [{"rule": "r"}], "devices": [
            {"index": 0, "categories": {"weights": {"live_bytes": 1030 * MiB}}}]}, 0, {"weights": 1000 * MiB}))
        expect_not_pass("graphs off by 3 MiB", compare_categories("c", "", {"devices": [
            {"index": 0, "categories": {"graphs": {"live_bytes": 7 * MiB}}}]}, 0, {"graphs": 4 * MiB, "weights": 1}))
        expect_not_pass("a function no site names", compare_sites("c", "", {"sites": [
            {"id": 1, "python": [{"file": "/x/engine.py", "function": "TinyEngine.load_weights", "line": 1}]}],
            "devices": [{"index": 0, "top_allocations": [{"site": 1, "bytes": 1}]}]}, 0, "engine.py",
            ["load_weights", "init_memory_pool"]))
        expect_not_pass("ipc: the importer opened nothing", compare_ipc(
            "c", "", {"devices": [{"index": 0, "ipc": {"exported_bytes": 8 * MiB}, "categories": {"ipc": {"live_bytes": 8 * MiB}}}]},
            {"devices": [{"index": 0, "ipc": {"imported_bytes": 0}}]}, 0, 8 * MiB))
        expect_not_pass("comm empty", compare_comm("c", "", {"sites": [{"rule": "r"}], "devices": [
            {"index": 0, "categories": {"comm": {"live_bytes": 0}}, "live_bytes": 0}]}, 0))
        expect_not_pass("no pinned memory", compare_host("c", "", {"host": {"pinned_peak_bytes": 0}}))
        expect_not_pass("driver path for a runtime allocation", compare_seen("c", "", {"devices": [
            {"index": 0, "top_allocations": [{"api": "cudaMalloc", "bytes": 64 * MiB}]}]}, 0, 64 * MiB, "driver"))
        expect_not_pass("overhead 5%", compare_overhead("c", "", [1.0] * 5, [1.05] * 5))
        ok = not bad
        self.add(Result("C", "self-test controls: every comparison fails on wrong ground truth", "PASS" if ok else "FAIL",
                        f"{len(tried)} wrong inputs rejected" if ok else "accepted: " + "; ".join(bad), tried=tried))

    # ---- driving it all -------------------------------------------------------------------------

    def main(self):
        os.makedirs(self.out, exist_ok=True)
        print(f"culedger GPU validation kit ({'self-test on the simulated stack' if self.sim else 'GPU'}): "
              f"library {self.lib}, reports in {self.out}", flush=True)
        self.environment = {}
        if self.sim and self.site:
            print(f"INFO  self-test: real workloads ({self.dir}) with PyTorch from {self.site}; "
                  f"nvidia-smi is the stand-in sim/smi.py", flush=True)
            for script, why in sorted(self.stand_ins.items()):
                print(f"INFO  self-test: sim/{script} stands in for workloads/{script}: {why}", flush=True)
        elif self.sim:
            print("INFO  self-test: real frameworks not installed (target/frameworks/site, make frameworks); "
                  "running the ctypes stand-ins in sim/", flush=True)
        steps = [self.check_environment, self.check_caching_allocator, self.check_mem_get_info, self.check_engine,
                 self.check_ipc, self.check_nccl, self.check_frameworks, self.check_overhead]
        try:
            for step in steps:
                if self.left() <= 5:
                    self.add(Result("-", step.__name__, "FAIL", f"not run: the {BUDGET_S} s budget is spent"))
                    continue
                try:
                    step()
                except Exception as e:  # a broken check is a FAIL with its reason, not a traceback
                    self.add(Result("-", step.__name__, "FAIL", f"{type(e).__name__}: {e}"))
            if self.sim:
                self.controls()
            self.render_with_cli()
        finally:
            if self.sim:
                try:
                    os.unlink(f"/dev/shm/fakecuda-{self.machine}")
                except OSError:
                    pass
        elapsed = time.monotonic() - self.start
        counts = {s: sum(r.status == s for r in self.results) for s in ("PASS", "FAIL", "SKIP")}
        verdict = "FAIL" if counts["FAIL"] else "PASS"
        summary = {"kit": "culedger-gpu-validation/1", "mode": "self-test" if self.sim else "gpu",
                   "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "elapsed_s": round(elapsed, 1),
                   "budget_s": BUDGET_S, "workloads": "real" if not self.sim or self.site else "stand-ins",
                   "frameworks_site": self.site, "stand_ins": sorted(self.stand_ins), "verdict": verdict, "counts": counts, "environment": self.environment,
                   "library": self.lib, "cli": self.cli, "checks": [r.as_json() for r in self.results]}
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        lines = [r.line() for r in self.results]
        tail = (f"{verdict}: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped "
                f"in {elapsed:.1f} s (budget {BUDGET_S} s)")
        with open(os.path.join(self.out, "summary.txt"), "w") as f:
            f.write("\n".join(lines + [tail]) + "\n")
        print(tail, flush=True)
        if elapsed > BUDGET_S:
            print(f"FAIL  the kit took {elapsed:.0f} s, over its {BUDGET_S} s budget", flush=True)
            return 1
        return 1 if counts["FAIL"] else 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="REPORT_DIR: reports, logs, summary.json, summary.txt")
    ap.add_argument("--lib", required=True, help="libculedger.so")
    ap.add_argument("--cli", help="the culedger CLI (optional: renders `culedger report` per run)")
    ap.add_argument("--python", help="interpreter for the workloads (default: this one)")
    ap.add_argument("--self-test", action="store_true", help="run on the simulated stack (no GPU)")
    ap.add_argument("--steps", type=int, default=2000, help="decode steps per timed run")
    ap.add_argument("--rounds", type=int, default=2, help="plain/culedger pairs for the overhead check")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.lib):
        print(f"kit: {args.lib}: no such library", file=sys.stderr)
        return 2
    if args.cli and not shutil.which(args.cli) and not os.path.isfile(args.cli):
        print(f"kit: {args.cli}: no such program", file=sys.stderr)
        return 2
    return Kit(args).main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
