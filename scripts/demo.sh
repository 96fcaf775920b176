#!/usr/bin/env bash
# The demo (`make demo` builds everything first): an SGLang-like server start-up on the
# simulated CUDA stack, with 2 tensor-parallel ranks on 2 simulated GPUs, in two
# configurations run under `culedger run`:
#
#   nccl       all-reduce through NCCL only: the server starts.
#   custom-ar  SGLang's custom all-reduce (IPC buffers, peer mappings): the KV pool was sized
#              from a free-memory probe taken before the peer mappings cost their hidden
#              driver memory, and its allocation fails (OOM, exit 1).
#
# Then `culedger report` on the failing run, `culedger diff` of the two, a plot and the
# exports. Outputs under target/demo/. Exit status 0 when the story played out as above.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=target/release/culedger
LIB=target/release/libculedger.so
SIM=target/sim/lib
for f in "$BIN" "$LIB" "$SIM/libcudart.so.12" "$SIM/libcuda.so.1"; do
    [ -e "$f" ] || { echo "demo: $f is missing: run 'make demo' (it builds everything first)" >&2; exit 2; }
done

# The simulated machine: 2 GPUs of 24 GiB, 256 MiB of driver memory per peer mapping.
export LD_LIBRARY_PATH="$PWD/$SIM${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKECUDA_DEVICES=2 FAKECUDA_TOTAL_MIB=24576 FAKECUDA_PEER_MIB=256
# 8 GiB of weights per rank; a 1% reserve, as servers tuned for the largest KV cache use.
SIM_ARGS=(--tp 2 --model-mib 8192 --mem-fraction-static 0.99)
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
    echo "### $cfg: culedger run -o $OUT/$cfg -- python3 shim-tests/py/sglang_sim.py ${SIM_ARGS[*]} --allreduce $allreduce"
    set +e
    "$BIN" run -o "$OUT/$cfg" --lib "$LIB" -- python3 shim-tests/py/sglang_sim.py "${SIM_ARGS[@]}" --allreduce "$allreduce"
    status[$cfg]=$?
    set -e
    rm -f "/dev/shm/fakecuda-$FAKECUDA_MACHINE"
done

echo
echo "### culedger report $OUT/custom-ar"
"$BIN" report "$OUT/custom-ar"
echo
echo "### culedger diff $OUT/nccl $OUT/custom-ar"
"$BIN" diff "$OUT/nccl" "$OUT/custom-ar"
"$BIN" plot "$OUT/custom-ar" -o "$OUT/custom-ar.svg"
"$BIN" export "$OUT/custom-ar" --perfetto "$OUT/custom-ar.trace.json" --memory-viz "$OUT/custom-ar.pickle"
echo
echo "demo: plot $OUT/custom-ar.svg, Perfetto trace $OUT/custom-ar.trace.json, memory_viz snapshot $OUT/custom-ar.pickle"

if [ "${status[nccl]}" -ne 0 ] || [ "${status[custom-ar]}" -ne 1 ]; then
    echo "demo: expected nccl to pass and custom-ar to fail with exit 1; got ${status[nccl]} and ${status[custom-ar]}" >&2
    exit 1
fi
echo "demo: nccl started, custom-ar ran out of memory: see the diff above for why"
