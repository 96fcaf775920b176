#!/usr/bin/env bash
# `make bench`: what culedger adds to each hooked call, measured by target/release/culedger_bench
# (shim-tests/scenarios/src/bin/culedger_bench.rs) on the minimal-cost driver (target/sim/min),
# each figure against the same program without the preload, printed beside its target.
# Figures and how to read them: BENCHMARKS.md. Arguments are passed to the harness:
#   scripts/bench.sh --quick             fewer rounds and batches (a smoke run)
#   scripts/bench.sh --only pair         only the figures whose mode or name contains "pair"
#   scripts/bench.sh --json out.json     also write the figures as JSON
#   scripts/bench.sh longrun 100000000   memory and report size over a long run
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/culedger_bench
[ -x "$BIN" ] || { echo "bench: $BIN is missing: run 'make bench' (it builds first)" >&2; exit 2; }
exec "$BIN" "$@"
