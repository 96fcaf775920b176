#!/usr/bin/env bash
# Runs the demo's custom all-reduce configuration (what `make demo` runs: the server, the
# machine and the arguments of scripts/demo-config.sh, 8 ranks on 8 simulated 96 GiB GPUs) N
# times (default 6) and prints, per run and GPU, each process's hidden driver costs per API as
# measured and after de-noising (`culedger report --format json`), then whether the de-noised
# costs agree within 1% across the runs. `make` first. Usage: scripts/stable-costs.sh [N]
#
# The measured costs of one run can include a peer rank's context creation that fell into
# the measurement window (how often depends on scheduling); the de-noised ones must not.
# KEEP=DIR keeps each run's reports (DIR/runN) to look into a run that disagrees.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-6}
BIN=target/release/culedger
if [ -n "${KEEP:-}" ]; then
    OUT=$KEEP
    mkdir -p "$OUT"
else
    OUT=$(mktemp -d)
    trap 'rm -rf "$OUT"' EXIT
fi
. scripts/demo-config.sh
for i in $(seq 1 "$N"); do
    export FAKECUDA_MACHINE="culedger-stable-$$-$i"
    "$BIN" run -o "$OUT/run$i" -- python3 "$SERVER" "${SERVER_ARGS[@]}" --allreduce custom >/dev/null 2>&1 || true
    rm -f "/dev/shm/fakecuda-$FAKECUDA_MACHINE"
    "$BIN" report "$OUT/run$i" --format json >"$OUT/run$i.json"
done
python3 - "$OUT" "$N" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
runs = []
for i in range(1, n + 1):
    d = json.load(open(f"{out}/run{i}.json"))
    costs = {}
    for dev in d["devices"]:
        for c in dev["driver_costs"]:
            # Ranks are named by their title (pids differ between runs).
            key = (dev["index"], c["label"], c["api"])
            costs[key] = (c["measured_bytes"], c["bytes"], c["uncertain"])
    runs.append(costs)
MIB = 1 << 20
keys = sorted(set().union(*runs))
print(f"{'GPU':>3}  {'process':<34} {'api':<28} " + "  ".join(f"run{i + 1:<2} meas/denoised" for i in range(n)))
ok = True
for k in keys:
    vals = [r.get(k) for r in runs]
    cells = ["        -        " if v is None else f"{v[0] / MIB:7.1f}/{v[1] / MIB:7.1f}{'?' if v[2] else ' '}" for v in vals]
    print(f"{k[0]:>3}  {k[1][:34]:<34} {k[2]:<28} " + "  ".join(cells))
    denoised = [v[1] for v in vals if v is not None]
    if len(denoised) != n or max(denoised) - min(denoised) > 0.01 * max(abs(x) for x in denoised):
        ok = False
measured_differ = any(
    len({r[k][0] for r in runs if k in r}) > 1 for k in keys
)
print(f"measured costs differ between runs: {'yes' if measured_differ else 'no'}")
print(f"de-noised costs agree within 1% across {n} runs: {'yes' if ok else 'NO'}")
sys.exit(0 if ok else 1)
PY
