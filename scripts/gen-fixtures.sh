#!/usr/bin/env bash
# Regenerates the CLI's fixtures (cli/tests/fixtures/{nccl,custom-ar,custom-ar-tp8,explain-*}/)
# from the simulated CUDA stack:
#
#   scripts/gen-fixtures.sh [NAME...]    make, then run the configurations (all, or those
#                                        named) under `culedger run`, then normalise and copy
#                                        the reports
#   scripts/gen-fixtures.sh --from DIR [NAME...]
#                                        only normalise the runs in DIR/<name> (those present)
#
# The configurations: the demo's server (shim-tests/py/engines/sglang_server.py, SGLang's
# module tree over the simulated PyTorch: a launcher and tensor-parallel ranks named
# `sglang::scheduler_TP<n>`; 8 GiB of weights per rank in 8 layers, mem_fraction_static 0.97)
# on two simulated 24 GiB GPUs with NCCL (`nccl`: it starts) and with the custom all-reduce
# (`custom-ar`: every rank runs out of memory in its KV pool; 1 GiB of driver memory per peer
# mapping, as in the demo), and on eight simulated 24 GiB GPUs with 8 ranks and the custom
# all-reduce (`custom-ar-tp8`; 256 MiB per peer mapping, so that the pools fail in their
# second half there too).
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

# name, tensor-parallel ranks (= simulated GPUs), all-reduce, driver memory per peer mapping (MiB)
CONFIGS=("nccl 2 nccl 1024" "custom-ar 2 custom 1024" "custom-ar-tp8 8 custom 256")
# The server and the model of every SGLang configuration below.
SERVER="engines/sglang_server.py --model-mib 8192 --layers 8 --attention-workspace-mib 64"
# The fixtures of `culedger explain` (cli/tests/explain.rs): name|simulated GPUs|fake driver
# settings|simulation (under shim-tests/py/) and its arguments.
#   explain-ok              NCCL start-up on 96 GiB GPUs: nothing to report ("no findings").
#   explain-untracked       custom all-reduce with a 7% reserve: the start-up fits, but the peer
#                           mappings' driver memory came after the sizing query and left less
#                           free than it took.
#   explain-shared-gpu      another job of the run takes 4 GiB on GPU 1 after the ranks' sizing
#                           query: rank 1's pool fails, the finding names the job's pid.
#   explain-stray-contexts  every rank reads GPU 0's free memory before selecting its GPU:
#                           rank 0's pool is smaller, the ranks are imbalanced.
#   explain-leak            a server whose request state grows at every step.
#   explain-truncated       the custom-ar start-up with rank 1's report cut in half.
EXPLAIN_CONFIGS=(
    "explain-ok|2|FAKECUDA_TOTAL_MIB=98304|$SERVER --tp 2 --mem-fraction-static 0.88 --allreduce nccl"
    "explain-untracked|2|FAKECUDA_TOTAL_MIB=24576 FAKECUDA_PEER_MIB=256|$SERVER --tp 2 --mem-fraction-static 0.93 --allreduce custom"
    "explain-shared-gpu|2|FAKECUDA_TOTAL_MIB=24576|engines/engine_sim.py --scenario shared-gpu --tp 2 --mem-fraction-static 0.9"
    "explain-stray-contexts|4|FAKECUDA_TOTAL_MIB=24576|engines/engine_sim.py --scenario stray-contexts --tp 4"
    "explain-leak|1|FAKECUDA_TOTAL_MIB=24576|engines/engine_sim.py --scenario leak --tp 1 --steps 30"
    "explain-truncated|2|FAKECUDA_TOTAL_MIB=24576 FAKECUDA_PEER_MIB=1024|$SERVER --tp 2 --mem-fraction-static 0.97 --allreduce custom"
)

if [ "${1:-}" = "--from" ]; then
    SRC=${2:?usage: $0 [--from DIR] [NAME...]}
    shift 2
fi
# Names given: only those fixtures.
ONLY=("$@")
wanted() { [ ${#ONLY[@]} -eq 0 ] || printf '%s\n' "${ONLY[@]}" | grep -qx "$1"; }

if [ -z "${SRC:-}" ]; then
    make all
    SRC=$(mktemp -d)
    trap 'rm -rf "$SRC"' EXIT
    export LD_LIBRARY_PATH="$PWD/target/sim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    for c in "${EXPLAIN_CONFIGS[@]}"; do
        IFS='|' read -r cfg gpus knobs sim <<<"$c"
        wanted "$cfg" || continue
        # shellcheck disable=SC2086 # the knobs and arguments are words
        env FAKECUDA_MACHINE="culedger-fixtures-$cfg-$$" FAKECUDA_DEVICES="$gpus" $knobs \
            target/release/culedger run -o "$SRC/$cfg" -- python3 "shim-tests/py/${sim%% *}" ${sim#* } >/dev/null 2>&1 || true
        rm -f "/dev/shm/fakecuda-culedger-fixtures-$cfg-$$"
    done
    # Two (or eight) simulated 24 GiB GPUs.
    export FAKECUDA_TOTAL_MIB=24576
    for c in "${CONFIGS[@]}"; do
        read -r cfg tp allreduce peer <<<"$c"
        wanted "$cfg" || continue
        # The 8-rank fixture should show the de-noising of driver costs: keep a run where a
        # peer's context creation fell into some measurement window (up to 20 tries; how
        # often it happens depends on scheduling).
        for try in $(seq 1 20); do
            rm -rf "${SRC:?}/$cfg"
            export FAKECUDA_MACHINE="culedger-fixtures-$cfg-$$" FAKECUDA_DEVICES=$tp FAKECUDA_PEER_MIB=$peer
            # shellcheck disable=SC2086 # the server and its arguments are words
            target/release/culedger run -o "$SRC/$cfg" -- python3 shim-tests/py/$SERVER \
                --tp "$tp" --mem-fraction-static 0.97 --allreduce "$allreduce" >/dev/null 2>&1 || true
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
PID_BASE = {"nccl": 4100, "custom-ar": 5100, "custom-ar-tp8": 6100, "explain-ok": 7100, "explain-untracked": 7200,
            "explain-shared-gpu": 7300, "explain-stray-contexts": 7400, "explain-leak": 7500, "explain-truncated": 7600}
# A report cut in half (what a full disk or a copy interrupted leaves): the last process's.
TRUNCATED = {"explain-truncated"}


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
        text = json.dumps(r, indent=1) + "\n"
        if cfg in TRUNCATED and r is reports[-1]:
            text = text[: len(text) // 2]
        with open(path, "w") as f:
            f.write(text)
        print(f"gen-fixtures: {path}")
PY
echo "gen-fixtures: now refresh the goldens: UPDATE_GOLDEN=1 cargo test --release -p culedger-cli"
