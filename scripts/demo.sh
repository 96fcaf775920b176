#!/usr/bin/env bash
# The demo (`make demo` builds everything first): the seed reproduction. The simulated SGLang
# server start-up (shim-tests/py/engines/sglang_server.py: SGLang's module tree and classes,
# PyTorch's caching allocator in front of the runtime) with 8 tensor-parallel ranks on 8
# simulated 96 GiB PCIe GPUs, in two configurations run under `culedger run`:
#
#   nccl       all-reduce through NCCL only (--disable-custom-all-reduce): the server starts;
#              each rank's KV pool gets about 11.6 GiB and about 8.6 GiB stay free.
#   custom-ar  the custom all-reduce on: the KV pool was sized from a free-memory query
#              (profile_max_num_token's) taken before the custom all-reduce's lazy IPC opens
#              and peer access cost their driver memory (and before the other ranks' peer
#              access put their contexts on every GPU); the V buffers of the pool
#              (MHATokenToKVPool._create_buffers) no longer fit and the launch fails (exit 1).
#
# The numbers come from the simulated stack's parameters below, chosen so that the mechanism
# is the one the project started from. Then `culedger explain` on the failing run and
# `culedger diff` of the two, a plot, the exports and the HTML pages (`culedger html`: the failing
# run; both runs with their diff). Outputs under target/demo/. Exit status
# 0 when the story played out as above.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=target/release/culedger
LIB=target/release/libculedger.so
SIM=target/sim/lib
for f in "$BIN" "$LIB" "$SIM/libcudart.so.12" "$SIM/libcuda.so.1"; do
    [ -e "$f" ] || { echo "demo: $f is missing: run 'make demo' (it builds everything first)" >&2; exit 2; }
done

# The simulated machine and the server's arguments.
. scripts/demo-config.sh
OUT=target/demo

rm -rf "$OUT"
mkdir -p "$OUT"
declare -A status
for cfg in nccl custom-ar; do
    allreduce=nccl
    [ "$cfg" = custom-ar ] && allreduce=custom
    # A fresh simulated machine per configuration (its usage lives in /dev/shm).
    export FAKECUDA_MACHINE="culedger-demo-$cfg-$$"
    echo
    echo "### $cfg: culedger run -o $OUT/$cfg -- python3 $SERVER ${SERVER_ARGS[*]} --allreduce $allreduce"
    # `culedger run` ends with one screen on stderr (the verdict, the GPUs, explain's headline,
    # where to go next); the demo keeps the server's own lines and that screen, which starts at
    # its title `culedger: DIR (...)`.
    set +e
    "$BIN" run -o "$OUT/$cfg" --lib "$LIB" -- python3 "$SERVER" "${SERVER_ARGS[@]}" --allreduce "$allreduce" \
        2> >(awk '/^\[(launcher|rank [0-9]+)\] / && !on { print; next } /^culedger: [^ ]+ \(/ { on = 1 } on { print }' >&2)
    status[$cfg]=$?
    set -e
    wait
    rm -f "/dev/shm/fakecuda-$FAKECUDA_MACHINE"
done

echo
echo "### culedger explain $OUT/custom-ar"
set +e
"$BIN" explain "$OUT/custom-ar"
explained=$?
set -e
echo
echo "### culedger diff $OUT/nccl $OUT/custom-ar"
"$BIN" diff "$OUT/nccl" "$OUT/custom-ar"
"$BIN" plot "$OUT/custom-ar" -o "$OUT/custom-ar.svg"
"$BIN" export "$OUT/custom-ar" --perfetto "$OUT/custom-ar.trace.json" --memory-viz "$OUT/custom-ar.pickle"
# The pages: the failing run; the two runs with their diff first.
"$BIN" html "$OUT/custom-ar" -o "$OUT/demo.html"
"$BIN" html "$OUT/nccl" "$OUT/custom-ar" -o "$OUT/demo-diff.html"
for page in "$OUT/demo.html" "$OUT/demo-diff.html"; do
    page_bytes=$(wc -c < "$page")
    if [ "$page_bytes" -ge $((5 << 20)) ]; then
        echo "demo: $page is $page_bytes bytes, over the 5 MB it must stay under" >&2
        exit 1
    fi
done
echo
echo "demo: plot $OUT/custom-ar.svg, Perfetto trace $OUT/custom-ar.trace.json, memory_viz snapshot $OUT/custom-ar.pickle"
echo "demo: HTML page $OUT/demo.html, with the diff $OUT/demo-diff.html (open them in a browser; they need no network)"

if [ "${status[nccl]}" -ne 0 ] || [ "${status[custom-ar]}" -ne 1 ] || [ "$explained" -ne 1 ]; then
    echo "demo: expected nccl to pass and custom-ar to fail with exit 1 (explained with exit 1); got" \
        "${status[nccl]}, ${status[custom-ar]} and $explained" >&2
    exit 1
fi
echo "demo: nccl started, custom-ar ran out of memory: the explanation above says why"
