#!/usr/bin/env bash
# Regenerates the CLI's fixtures (cli/tests/fixtures/{nccl,custom-ar}/) from the simulated
# CUDA stack:
#
#   scripts/gen-fixtures.sh              make, then run both demo configurations under
#                                        `culedger run`, then normalise and copy the reports
#   scripts/gen-fixtures.sh --from DIR   only normalise DIR/nccl and DIR/custom-ar (e.g. the
#                                        output of scripts/demo.sh, target/demo)
#
# Normalising makes golden outputs stable across runs and machines: pids become 4100.. (nccl)
# and 5100.. (custom-ar), the launcher first, then rank 0, rank 1, the host `sim-host`, times are replaced by their
# rank in the run's global order (10 ms apart, so ordering across processes is kept), device
# pointers by per-process sequence numbers, paths by repository-relative ones.
# Afterwards refresh the goldens: UPDATE_GOLDEN=1 cargo test --release -p culedger-cli
set -euo pipefail
cd "$(dirname "$0")/.."
FIXTURES=cli/tests/fixtures

if [ "${1:-}" = "--from" ]; then
    SRC=${2:?usage: $0 --from DIR}
else
    make all
    SRC=$(mktemp -d)
    trap 'rm -rf "$SRC"' EXIT
    export LD_LIBRARY_PATH="$PWD/target/sim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # The same simulated machine as scripts/demo.sh.
    export FAKECUDA_DEVICES=2 FAKECUDA_TOTAL_MIB=24576 FAKECUDA_PEER_MIB=256
    for cfg in nccl custom-ar; do
        allreduce=nccl
        [ "$cfg" = custom-ar ] && allreduce=custom
        export FAKECUDA_MACHINE="culedger-fixtures-$cfg-$$"
        target/release/culedger run -o "$SRC/$cfg" -- python3 shim-tests/py/sglang_sim.py \
            --tp 2 --model-mib 8192 --mem-fraction-static 0.99 --allreduce "$allreduce" || true
        rm -f "/dev/shm/fakecuda-$FAKECUDA_MACHINE"
    done
fi

python3 - "$SRC" "$FIXTURES" "$PWD" <<'PY'
import glob, json, os, re, sys

src, dst, repo = sys.argv[1:4]
BASE_MS = 1767225600000  # 2026-01-01T00:00:00Z
PID_BASE = {"nccl": 4100, "custom-ar": 5100}
TIME_KEYS = ("t_ms", "peak_t_ms")


def walk(node, fn):
    """Calls fn(dict) on every object of a JSON tree."""
    if isinstance(node, dict):
        fn(node)
        for v in node.values():
            walk(v, fn)
    elif isinstance(node, list):
        for v in node:
            walk(v, fn)


for cfg, pid_base in PID_BASE.items():
    files = sorted(glob.glob(os.path.join(src, cfg, "culedger-*.json")))
    if not files:
        sys.exit(f"gen-fixtures: no reports in {os.path.join(src, cfg)}")
    reports = [json.load(open(f)) for f in files]
    # Launcher first, then the ranks in rank order (their start order is a race).
    def order(r):
        argv = r["process"]["argv"]
        rank = int(argv[argv.index("--worker") + 1]) if "--worker" in argv else -1
        return (rank, r["process"]["start_unix_ms"], r["process"]["pid"])
    reports.sort(key=order)
    pids = {r["process"]["pid"]: pid_base + i for i, r in enumerate(reports)}

    # Every absolute time of the run, ranked.
    times = set()
    for r in reports:
        start = r["process"]["start_unix_ms"]
        times.update((start, r["process"]["end_unix_ms"]))
        walk(r["devices"], lambda o: times.update(start + o[k] for k in TIME_KEYS if isinstance(o.get(k), int)))
    rank = {t: BASE_MS + 10 * i for i, t in enumerate(sorted(times))}

    out_dir = os.path.join(dst, cfg)
    for old in glob.glob(os.path.join(out_dir, "culedger-*.json")):
        os.remove(old)
    os.makedirs(out_dir, exist_ok=True)
    for r in reports:
        p = r["process"]
        start = p["start_unix_ms"]

        def retime(o, start=start):
            for k in TIME_KEYS:
                if isinstance(o.get(k), int):
                    o[k] = rank[start + o[k]] - rank[start]
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

        p["start_unix_ms"], p["end_unix_ms"] = rank[start], rank[p["end_unix_ms"]]
        for k in ("pid", "ppid", "forked_from"):
            if p.get(k) is not None:
                p[k] = pids.get(p[k], pid_base - 1)
        p["host"] = "sim-host"
        p["exe"] = "/usr/bin/python3"
        p["argv"] = [os.path.basename(a) if i == 0 else a.replace(repo + "/", "") for i, a in enumerate(p["argv"])]
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
