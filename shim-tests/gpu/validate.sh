#!/usr/bin/env bash
# culedger GPU validation kit. See shim-tests/gpu/README.md.
#
#   validate.sh REPORT_DIR              on a Linux machine with one NVIDIA GPU, Python and PyTorch
#   validate.sh --self-test REPORT_DIR  the same comparisons on the simulated stack (no GPU; make test)
#
# Needs no Rust and no network: the library and the CLI come prebuilt, found in this order:
#   --lib PATH / --cli PATH, $CULEDGER_LIB / $CULEDGER_BIN, --wheel culedger-*.whl (unpacked into
#   REPORT_DIR/tools), target/release/ of this checkout (`make` builds them there).
# Prints PASS/FAIL/SKIP per check with its figures, writes every report, the workloads' logs,
# summary.json and summary.txt into REPORT_DIR. Exit status: 0 all passed or skipped, 1 a check
# failed, 2 bad usage or a missing piece.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

self_test=0 out="" lib=${CULEDGER_LIB:-} cli=${CULEDGER_BIN:-} wheel="" extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --self-test) self_test=1 ;;
        --lib) lib=$2; shift ;;
        --cli) cli=$2; shift ;;
        --wheel) wheel=$2; shift ;;
        --steps|--rounds|--python) extra+=("$1" "$2"); shift ;;
        -h|--help) usage ;;
        -*) echo "validate.sh: unknown option $1" >&2; usage ;;
        *) [ -z "$out" ] || usage; out=$1 ;;
    esac
    shift
done
[ -n "$out" ] || usage
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}

if [ -n "$wheel" ] && [ -z "$lib" ]; then
    # A wheel of [7] carries libculedger.so inside the package and the CLI as a script.
    "$py" - "$wheel" "$out/tools" <<'PY'
import os, stat, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if base in ("libculedger.so", "culedger"):
            path = os.path.join(dest, base)
            os.makedirs(dest, exist_ok=True)
            with z.open(name) as src, open(path, "wb") as dst:
                dst.write(src.read())
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
PY
    lib=$out/tools/libculedger.so
    [ -z "$cli" ] && [ -x "$out/tools/culedger" ] && cli=$out/tools/culedger
fi
[ -n "$lib" ] || lib=$root/target/release/libculedger.so
[ -n "$cli" ] || { [ -x "$root/target/release/culedger" ] && cli=$root/target/release/culedger; } || true
if [ ! -f "$lib" ]; then
    echo "validate.sh: $lib: no such library (give --lib PATH, CULEDGER_LIB or --wheel; or run make)" >&2
    exit 2
fi
args=(--out "$out" --lib "$lib")
[ -n "$cli" ] && args+=(--cli "$cli")

if [ "$self_test" = 1 ]; then
    sim=${CULEDGER_SIM_DIR:-$root/target/sim}
    if [ ! -f "$sim/lib/libcuda.so.1" ]; then
        echo "validate.sh: the simulated stack is missing in $sim (run make sim)" >&2
        exit 2
    fi
    export LD_LIBRARY_PATH="$sim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    args+=(--self-test --steps 200 --rounds 1)
fi
exec "$py" "$here/kit.py" "${args[@]}" ${extra[@]+"${extra[@]}"}
