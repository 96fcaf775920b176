#!/usr/bin/env bash
# Regenerates the CLI's fixtures (cli/tests/fixtures/{nccl,custom-ar,custom-ar-tp8}/) from the
# simulated CUDA stack:
#
#   scripts/gen-fixtures.sh              make, then run the demo configurations under
#                                        `culedger run`, then normalise and copy the reports
#   scripts/gen-fixtures.sh --from DIR   only normalise DIR/nccl, DIR/custom-ar and
#                                        DIR/custom-ar-tp8 (those present)
#
# The configurations: the demo's SGLang-like start-up (shim-tests/py/sglang_sim.py: a launcher
# and tensor-parallel ranks, 8 GiB of weights per rank, mem_fraction_static 0.99) on two
# simulated 24 GiB GPUs with NCCL (`nccl`) and with the custom all-reduce (`custom-ar`), and
# on eight simulated 24 GiB GPUs with 8 ranks and the custom all-reduce (`custom-ar-tp8`).
#
# Normalising makes golden outputs stable across runs and machines: pids become 4100.. (nccl),
# 5100.. (custom-ar) and 6100.. (custom-ar-tp8), the launcher first, then the ranks in rank
# order (their start order is a race), the host `sim-host`, the run
# id `<cfg>-run`, absolute times are replaced by their rank in the run's global order (1 ms
# apart, so ordering across processes and every measurement window is kept; `t_ms` stays
# `t_us / 1000`), device pointers by per-process sequence numbers, paths by repository-relative
# ones. Afterwards refresh the goldens: UPDATE_GOLDEN=1 cargo test --release -p culedger-cli
set -euo pipefail
cd "$(dirname "$0")/.."
FIXTURES=cli/tests/fixtures

# name, tensor-parallel ranks (= simulated GPUs), all-reduce
CONFIGS=("nccl 2 nccl" "custom-ar 2 custom" "custom-ar-tp8 8 custom")

if [ "${1:-}" = "--from" ]; then
    SRC=${2:?usage: $0 --from DIR}
else
    make all
    SRC=$(mktemp -d)
    trap 'rm -rf "$SRC"' EXIT
    export LD_LIBRARY_PATH="$PWD/target/sim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # The same simulated GPUs as scripts/demo.sh.
    export FAKECUDA_TOTAL_MIB=24576 FAKECUDA_PEER_MIB=256
    for c in "${CONFIGS[@]}"; do
        read -r cfg tp allreduce <<<"$c"
        # The 8-rank fixture should show the de-noising of driver costs: keep a run where a
        # peer's context creation fell into some measurement window (up to 20 tries; how
        # often it happens depends on scheduling).
        for try in $(seq 1 20); do
            rm -rf "${SRC:?}/$cfg"
            export FAKECUDA_MACHINE="culedger-fixtures-$cfg-$$" FAKECUDA_DEVICES=$tp
            target/release/culedger run -o "$SRC/$cfg" -- python3 shim-tests/py/sglang_sim.py \
                --tp "$tp" --model-mib 8192 --mem-fraction-static 0.99 --allreduce "$allreduce" >/dev/null 2>&1 || true
            rm -f "/dev/shm/fakecuda-$FAKECUDA_MACHINE"
            [ "$cfg" = custom-ar-tp8 ] || break
            if target/release/culedger report "$SRC/$cfg" --format json | python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if any(c["bytes"] != c["measured_bytes"] for dev in d["devices"] for c in dev["driver_costs"]) else 1)'
            then
                echo "gen-fixtures: $cfg: a contaminated measurement window on try $try"
                break
            fi
        done
    done
fi

python3 - "$SRC" "$FIXTURES" "$PWD" <<'PY'
import glob, json, os, re, sys

src, dst, repo = sys.argv[1:4]
BASE_MS = 1767225600000  # 2026-01-01T00:00:00Z
PID_BASE = {"nccl": 4100, "custom-ar": 5100, "custom-ar-tp8": 6100}


def walk(node, fn):
    """Calls fn(dict) on every object of a JSON tree."""
    if isinstance(node, dict):
        fn(node)
        for v in node.values():
            walk(v, fn)
    elif isinstance(node, list):
        for v in node:
            walk(v, fn)


def rel_us(o):
    """A record's process-relative time in microseconds (t_ms from writers before t_us)."""
    return o["t_us"] if isinstance(o.get("t_us"), int) else o["t_ms"] * 1000


for cfg, pid_base in PID_BASE.items():
    files = sorted(glob.glob(os.path.join(src, cfg, "culedger-*.json")))
    if not files:
        print(f"gen-fixtures: no reports in {os.path.join(src, cfg)}: skipped")
        continue
    reports = [json.load(open(f)) for f in files]
    start_us = lambda r: r["process"].get("start_unix_us", r["process"]["start_unix_ms"] * 1000)
    # Launcher first, then the ranks in rank order (their start order is a race).
    def order(r):
        rank = int(r["process"].get("env", {}).get("RANK", -1))
        return (rank, start_us(r), r["process"]["pid"])
    reports.sort(key=order)
    pids = {r["process"]["pid"]: pid_base + i for i, r in enumerate(reports)}

    # Every absolute time of the run (µs), ranked.
    times = set()

    def collect(o, start):
        if isinstance(o.get("t_ms"), int):
            times.add(start + rel_us(o))
        if isinstance(o.get("t0_us"), int):
            times.add(start + o["t0_us"])
        if isinstance(o.get("peak_t_ms"), int):
            times.add(start + o["peak_t_ms"] * 1000)

    for r in reports:
        start = start_us(r)
        times.update((start, r["process"]["end_unix_ms"] * 1000))
        walk(r["devices"], lambda o, start=start: collect(o, start))
    rank = {t: BASE_MS * 1000 + 1000 * i for i, t in enumerate(sorted(times))}

    out_dir = os.path.join(dst, cfg)
    for old in glob.glob(os.path.join(out_dir, "culedger-*.json")):
        os.remove(old)
    os.makedirs(out_dir, exist_ok=True)
    for r in reports:
        p = r["process"]
        start = start_us(r)
        new_start = rank[start]

        def retime(o, start=start, new_start=new_start):
            if isinstance(o.get("t_ms"), int):
                t = rank[start + rel_us(o)] - new_start
                o["t_ms"] = t // 1000
                if "t_us" in o:
                    o["t_us"] = t
            if isinstance(o.get("t0_us"), int):
                o["t0_us"] = rank[start + o["t0_us"]] - new_start
            if isinstance(o.get("peak_t_ms"), int):
                o["peak_t_ms"] = (rank[start + o["peak_t_ms"] * 1000] - new_start) // 1000
        walk(r["devices"], retime)

        ptrs = {}

        def reptr(o):
            if isinstance(o.get("ptr"), str):
                o["ptr"] = ptrs.setdefault(o["ptr"], hex(0x7F0000000000 + (len(ptrs) << 21)))
        walk(r["devices"], reptr)

        def redetail(o):
            if isinstance(o.get("detail"), str):
                o["detail"] = re.sub(r"0x[0-9a-fA-F]+", lambda m: ptrs.get(m.group(0), "0x?"), o["detail"])
        walk(r["devices"], redetail)

        p["start_unix_ms"], p["end_unix_ms"] = new_start // 1000, rank[p["end_unix_ms"] * 1000] // 1000
        if "start_unix_us" in p:
            p["start_unix_us"] = new_start
        for k in ("pid", "ppid", "forked_from"):
            if p.get(k) is not None:
                p[k] = pids.get(p[k], pid_base - 1)
        p["host"] = "sim-host"
        p["exe"] = "/usr/bin/python3"
        p["argv"] = [os.path.basename(a) if i == 0 else a.replace(repo + "/", "") for i, a in enumerate(p["argv"])]
        if "run_id" in p:
            p["run_id"] = f"{cfg}-run"
        r["settings"]["out_dir"] = f"culedger-out/{cfg}"
        r["health"]["warnings"] = [w.replace(repo + "/", "") for w in r["health"]["warnings"]]
        # Call sites: repository-relative files, the interpreter's own files under one
        # prefix, native offsets (which change with every build) zeroed.
        for site in r.get("sites", []):
            for f in site["python"]:
                f["file"] = re.sub(r"^.*/lib/python(3\.\d+)/", r"/usr/lib/python\1/", f["file"].replace(repo + "/", ""))
            for f in site["native"]:
                f["offset"] = "0x0"
        path = os.path.join(out_dir, f"culedger-{p['pid']}.json")
        with open(path, "w") as f:
            json.dump(r, f, indent=1)
            f.write("\n")
        print(f"gen-fixtures: {path}")
PY
echo "gen-fixtures: now refresh the goldens: UPDATE_GOLDEN=1 cargo test --release -p culedger-cli"
