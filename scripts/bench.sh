#!/usr/bin/env bash
# `make bench`: what culedger adds to each hooked call, measured by target/release/culedger_bench
# (shim-tests/scenarios/src/bin/culedger_bench.rs) on the minimal-cost driver (target/sim/min),
# each figure against the same program without the preload, printed beside its target: the
# runtime paths, and the driver reached through cuGetProcAddress only (2 MiB pairs from one
# call site with and without a site, on growing and reused addresses; the query; the copy);
# two real-torch step loops (served by the caching allocator; missing it every step) when
# `make frameworks` has installed torch.
# Then (without arguments) the cost of capturing a call site: Python frames read raw and
# native frames, through scripts/bench_sites.py; and the cost of urgent writes (a failing
# allocation with and without them, the window after a free-memory query) with rt_sigkill; and
# the real SGLang server's start-up with and without culedger (scripts/bench_sglang.sh).
# Figures and how to read them: BENCHMARKS.md. Arguments are passed to the harness:
#   scripts/bench.sh --quick             fewer rounds and batches (a smoke run)
#   scripts/bench.sh --only pair         only the figures whose mode or name contains "pair"
#   scripts/bench.sh --only drv          only the cuGetProcAddress-path figures (--only torch: the torch loops)
#   scripts/bench.sh --json out.json     also write the figures as JSON
#   scripts/bench.sh longrun 100000000   memory and report size over a long run
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/culedger_bench
[ -x "$BIN" ] || { echo "bench: $BIN is missing: run 'make bench' (it builds first)" >&2; exit 2; }
"$BIN" "$@"
[ $# -eq 0 ] || exit 0

# Call sites: what capturing one costs (Python and native frames, interned); the harness
# above measured the small-allocation path, which captures none (below CULEDGER_SITE_MIN).
LIB=$PWD/target/release/libculedger.so
PY=${PYTHON:-python3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"; rm -f /dev/shm/fakecuda-culedger-bench-$$' EXIT
export FAKECUDA_MACHINE=culedger-bench-$$
export LD_LIBRARY_PATH="$PWD/target/sim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
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

# Urgent writes (docs/reliability.md): what a failed allocation costs when it returns only once
# the report holding it is on disk, and what the window of writes after a free-memory query
# costs, on the simulated driver (target/sim/bin/rt_sigkill).
SIGK=target/sim/bin/rt_sigkill
if [ -x "$SIGK" ]; then
    median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    health() { # FIELD -> its value in the one report under $OUT
        python3 -c "
import json, glob
print(json.load(open(glob.glob('$OUT/culedger-*.json')[0]))['health'].get('$1', 0))"
    }
    fail_ns() { # N PRELOAD(0/1) FLUSH_MS -> ns per failing cudaMalloc (median of 5)
        for _ in 1 2 3 4 5; do
            rm -rf "${OUT:?}"/*
            if [ "$2" = 1 ]; then
                LD_PRELOAD="$LIB" CULEDGER_OUT="$OUT" CULEDGER_FLUSH_MS="$3" "$SIGK" loop "$1"
            else
                "$SIGK" loop "$1"
            fi | sed -n 's/^RESULT .*ns_per_call=//p'
        done | median
    }
    plain=$(fail_ns 50 0 1000)
    no_urgent=$(fail_ns 50 1 0)
    urgent=$(fail_ns 50 1 1000)
    deferred=$(health urgent_deferred)
    writes=$(health urgent_writes)
    loop=$(fail_ns 1000 1 1000)
    loop_writes=$(health urgent_writes)
    loop_deferred=$(health urgent_deferred)
    echo "bench: a failing cudaMalloc (2x the device), 50 in a row, median of 5:"
    echo "bench:   ${plain} ns without culedger, ${no_urgent} ns with it and no urgent write (CULEDGER_FLUSH_MS=0), ${urgent} ns with the urgent write (${writes} written, ${deferred} deferred)"
    echo "bench:   1000 in a row: ${loop} ns per call (${loop_writes} urgent writes, ${loop_deferred} deferred: failures never are)"
    window_cpu() { # Q -> process CPU ms of 2000 1 MiB allocations 1 ms apart, after a query when Q=1
        for _ in 1 2 3; do
            rm -rf "${OUT:?}"/*
            LD_PRELOAD="$LIB" CULEDGER_OUT="$OUT" "$SIGK" window 2000 "$1" | sed -n 's/^RESULT cpu_ns=//p'
        done | median
    }
    quiet=$(window_cpu 0)
    sized=$(window_cpu 1)
    wwrites=$(health urgent_writes)
    wus=$(health urgent_write_us)
    echo "bench: the sizing window: 2000 allocations of 1 MiB, 1 ms apart, under culedger (median of 3):"
    awk -v q="$quiet" -v s="$sized" -v w="$wwrites" -v u="$wus" 'BEGIN {printf "bench:   process CPU %.1f ms without a query, %.1f ms after one (%d window writes, %.2f ms writing, %.0f us each)\n", q / 1e6, s / 1e6, w, u / 1000, (w > 0 ? u / w : 0)}'
fi

# The real SGLang server's start-up to ready with and without culedger (scripts/bench_sglang.sh;
# skipped with one line when scripts/fetch-sglang.sh has not installed it). SGLANG_BENCH_TP=1
# where eight ranks are too slow for the machine; SGLANG_BENCH_ROUNDS (default 3).
scripts/bench_sglang.sh "${SGLANG_BENCH_TP:-8}" "${SGLANG_BENCH_ROUNDS:-3}"
