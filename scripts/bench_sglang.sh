#!/usr/bin/env bash
# The real SGLang server's start-up (`python -m sglang.launch_server`, sglang 0.5.23 from
# scripts/fetch-sglang.sh, a tiny Llama written here, --load-format dummy) on the simulated
# 8 x 80 GiB machine: seconds from launch to its readiness line, without culedger and under
# `culedger run --`, alternated, ROUNDS times; prints each pair and the ratio (median, min, max).
# Run by `make bench` (scripts/bench.sh) when target/sglang is installed; not part of make test.
#   scripts/bench_sglang.sh [TP [ROUNDS]]   (defaults: 8 and 3; TP 1 where 8 is too slow)
set -euo pipefail
cd "$(dirname "$0")/.."
TP=${1:-8}
ROUNDS=${2:-3}
PY=target/sglang/venv/bin/python
if [ ! -x "$PY" ] || [ ! -f target/sglang/site/sglang/__init__.py ]; then
    echo "bench: real SGLang start-up skipped: target/sglang is not installed (scripts/fetch-sglang.sh)"
    exit 0
fi
CULEDGER=$PWD/target/release/culedger
WORK=$(mktemp -d)
MACHINE=culedger-bench-sglang-$$
cleanup() {
    [ -n "${PID:-}" ] && kill -KILL -- "-$PID" 2>/dev/null || true
    rm -rf "$WORK"
    rm -f "/dev/shm/fakecuda-$MACHINE"
}
trap cleanup EXIT
mkdir -p "$WORK/model"
cat > "$WORK/model/config.json" <<'J'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
 "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1024,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
 "hidden_act": "silu", "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
J
export FAKECUDA_MACHINE=$MACHINE FAKECUDA_DRIVER_VERSION=13020 FAKECUDA_DEVICES=8 FAKECUDA_TOTAL_MIB=81920
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2=0 PYTHONDONTWRITEBYTECODE=1
export LD_LIBRARY_PATH="$PWD/target/sim/lib" CULEDGER_SIM_DIR="$PWD/target/sim"
unset CUDA_VISIBLE_DEVICES

# start MODE -> seconds to the readiness line (the server is then stopped with SIGTERM)
start() {
    local mode=$1 port log t0 pre=()
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # A fresh log each start: an earlier round's readiness line must not be read as this one's
    # (the launch truncates its log only once the shell behind `&` gets to it).
    log=$(mktemp "$WORK/$mode-XXXXXX.log")
    [ "$mode" = culedger ] && pre=("$CULEDGER" run --color never -o "$WORK/out-$RANDOM" --)
    shm_before=$(ls /dev/shm)
    t0=$(date +%s.%N)
    setsid "${pre[@]}" "$PY" -m sglang.launch_server --model-path "$WORK/model" --port "$port" --host 127.0.0.1 \
        --load-format dummy --skip-tokenizer-init --skip-server-warmup --attention-backend torch_native \
        --sampling-backend pytorch --disable-cuda-graph --tp "$TP" >"$log" 2>&1 &
    PID=$!
    until grep -q "The server is fired up and ready to roll!" "$log"; do
        if ! kill -0 "$PID" 2>/dev/null; then
            echo "bench: the $mode start exited before it was ready:" >&2
            tail -20 "$log" >&2
            exit 1
        fi
        sleep 0.2
    done
    python3 -c "import sys; print('%.3f' % (float(sys.argv[1]) - float(sys.argv[2])))" "$(date +%s.%N)" "$t0"
    kill -TERM "$PID"
    wait "$PID" 2>/dev/null || true
    kill -KILL -- "-$PID" 2>/dev/null || true
    PID=
    # What SGLang leaves in /dev/shm when its tree ends by a signal: its load-snapshot slots and
    # its pid-stamped segments whose creator is gone (as sglang/srt/utils/stale_shm_cleanup.py).
    comm -13 <(echo "$shm_before") <(ls /dev/shm) | python3 -c '
import os, sys
for n in sys.stdin.read().split():
    parts = n.split("_")
    gone = False
    if n.startswith("sgl_shm_") and len(parts) >= 5 and parts[-2].isdigit():
        try:
            os.kill(int(parts[-2]), 0)
        except ProcessLookupError:
            gone = True
    if n.startswith("sglang_loads_") or gone:
        os.unlink("/dev/shm/" + n)'
}

echo "bench: real SGLang 0.5.23 --tp $TP start-up to ready, without culedger and under culedger run, $ROUNDS rounds:"
ratios=()
for i in $(seq "$ROUNDS"); do
    bare=$(start bare)
    under=$(start culedger)
    r=$(python3 -c "import sys; print('%.4f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$under" "$bare")
    ratios+=("$r")
    printf 'bench:   round %d: %.1f s without, %.1f s under culedger (x%.3f)\n' "$i" "$bare" "$under" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk -v tp="$TP" '{a[NR]=$1} END {
    printf "bench:   --tp %s start-up under culedger: x%.3f of the bare start (median of %d; min x%.3f, max x%.3f)\n",
        tp, (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2), NR, a[1], a[NR]}'
