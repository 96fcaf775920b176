#!/usr/bin/env bash
# `make bench`: the cost culedger adds to each hooked call, on the simulated stack, and the
# cost of capturing a call site (Python frames read raw + native frames, scripts/bench_sites.py).
# Runs `rt_ledger threads T N` (T threads, N cudaMalloc each, all but 64 per thread freed)
# without and with LD_PRELOAD=libculedger.so, 5 times each, and prints the medians and
# the overhead per hooked call (cudaMalloc + cudaFree). Also prints the report's size.
# Figures from a shared 2-core machine are rough; compare runs on the same machine only.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB=$PWD/target/release/libculedger.so
BIN=target/sim/bin/rt_ledger
[ -e "$LIB" ] && [ -e "$BIN" ] || { echo "bench: run 'make bench' (it builds first)" >&2; exit 2; }
export LD_LIBRARY_PATH="$PWD/target/sim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
THREADS=${BENCH_THREADS:-4}
ITERS=${BENCH_ITERS:-20000}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"; rm -f /dev/shm/fakecuda-culedger-bench-$$' EXIT
export FAKECUDA_MACHINE=culedger-bench-$$

run_ms() { # env... -> milliseconds of one run
    local t0 t1
    t0=$(date +%s%N)
    env "$@" "$BIN" threads "$THREADS" "$ITERS" >/dev/null
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

plain=$(for _ in 1 2 3 4 5; do run_ms CULEDGER_UNUSED=1; done | median)
with=$(for _ in 1 2 3 4 5; do rm -rf "$OUT"/*; run_ms LD_PRELOAD="$LIB" CULEDGER_OUT="$OUT"; done | median)
calls=$((2 * THREADS * ITERS - 64 * THREADS))
report=$(ls "$OUT"/culedger-*.json)
echo "bench: $THREADS threads x $ITERS cudaMalloc, all but 64 per thread freed: $calls hooked calls"
echo "bench: without culedger ${plain} ms, with culedger ${with} ms (median of 5)"
awk -v p="$plain" -v w="$with" -v c="$calls" \
    'BEGIN {printf "bench: overhead %.2f us per hooked call\n", (w - p) * 1000 / c}'
echo "bench: report $(stat -c %s "$report") bytes for $(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['devices'][0]; print(d['alloc_count'] - d['free_count'])" "$report") live allocations"

# Call sites: what capturing one costs (Python and native frames, interned), and that the
# small-allocation path does not capture.
PY=${PYTHON:-python3}
site_ns() { # CULEDGER_SITE_MIN -> ns per cudaMalloc+cudaFree pair (median of 5)
    for _ in 1 2 3 4 5; do
        rm -rf "${OUT:?}"/*
        LD_PRELOAD="$LIB" CULEDGER_OUT="$OUT" CULEDGER_SITE_MIN="$1" "$PY" scripts/bench_sites.py 20000 64 |
            sed -n 's/^RESULT ns_per_call=//p'
    done | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
with_sites=$(site_ns 0)
frames=$(python3 -c "
import json, glob
r = json.load(open(glob.glob('$OUT/culedger-*.json')[0]))
s = max(r['sites'], key=lambda s: len(s['python']))
print('%d Python + %d native' % (len(s['python']), len(s['native'])))")
no_sites=$(site_ns 1GiB)
echo "bench: call sites from Python $($PY -c 'import sys; print(sys.version.split()[0])') ($frames frames per site):"
echo "bench:   2 MiB cudaMalloc+cudaFree through ctypes: ${no_sites} ns without a site, ${with_sites} ns with one (thread CPU time, median of 5 x 20000)"
awk -v a="$with_sites" -v b="$no_sites" 'BEGIN {printf "bench:   added cost per captured site: %.2f us (target <= 5 us)\n", (a - b) / 1000}'
# The small path: the same C benchmark as above (4 KiB allocations, below CULEDGER_SITE_MIN:
# no site is captured) against the same run with a site for every allocation.
small=$(for _ in 1 2 3 4 5; do rm -rf "$OUT"/*; run_ms LD_PRELOAD="$LIB" CULEDGER_OUT="$OUT" CULEDGER_SITE_MIN=0; done | median)
echo "bench: small allocations: ${with} ms with the default CULEDGER_SITE_MIN (no site captured), ${small} ms when every one captures a site"
