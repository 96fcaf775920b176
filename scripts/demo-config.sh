# The demo's configuration, sourced by scripts/demo.sh and scripts/stable-costs.sh (and
# mirrored by shim-tests/scenarios/tests/engines.rs and explain_seed.rs): the simulated
# machine and the server's command line. Run from the repository root.
#
# The simulated machine: 8 GPUs of 96 GiB; a context costs 512 MiB (the fake's default), a
# peer mapping 1 GiB of driver memory, an IPC open 2 MiB, a graph instantiation 116 MiB.
export LD_LIBRARY_PATH="$PWD/target/sim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FAKECUDA_DEVICES=8 FAKECUDA_TOTAL_MIB=98304 FAKECUDA_PEER_MIB=1024 FAKECUDA_GRAPH_MIB=116
# The SGLang-like server; 75.4 GiB of weights per rank (a ~600 GB model over 8 GPUs),
# mem_fraction_static 0.9. Add `--allreduce nccl` or `--allreduce custom`.
# shellcheck disable=SC2034 # used by the scripts that source this file
SERVER=shim-tests/py/engines/sglang_server.py
# shellcheck disable=SC2034
SERVER_ARGS=(--tp 8 --model-mib 77184 --mem-fraction-static 0.9)
