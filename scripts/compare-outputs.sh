#!/usr/bin/env bash
# Runs every CLI output of two culedger binaries over the same reports and says which differ:
# report, explain, diff, whatif, check (text, markdown and json where a command has them),
# export (Perfetto and memory_viz), plot, html, metrics and top --once, over every fixture
# folder in cli/tests/fixtures (and every pair of them for diff and html of two runs), plus
# any run folders given after the two binaries (e.g. a scenario's scratch output).
# Usage: scripts/compare-outputs.sh BASE NEW [RUN_DIR...]
# Exit 0 when every output (stdout, stderr, exit code and the files written) is byte-identical.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 BASE NEW [RUN_DIR...]" >&2; exit 2; }
BASE=$(realpath "$1")
NEW=$(realpath "$2")
shift 2
DIRS=(cli/tests/fixtures/*/ "$@")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export COLUMNS=100 NO_COLOR=1 TZ=UTC
n=0
differ=0

# one NAME ARGS...: runs ARGS with each binary (the word OUT in ARGS is a file to write),
# and compares stdout, stderr, exit code and that file (OUT.html: html wants the suffix).
one() {
    local name=$1
    shift
    n=$((n + 1))
    for side in base new; do
        local bin=$BASE
        [ $side = new ] && bin=$NEW
        local d="$WORK/$side"
        mkdir -p "$d"
        rm -f "$d/out" "$d/out.html"
        local args=()
        for a in "$@"; do
            [ "$a" = OUT ] && a="$d/out"
            [ "$a" = OUT.html ] && a="$d/out.html"
            args+=("$a")
        done
        "$bin" "${args[@]}" >"$d/stdout" 2>"$d/stderr" </dev/null
        echo "rc=$?" >"$d/rc"
        # The output file's own path appears in some messages: the same word on both sides.
        sed -i "s#$d/out#OUT#g" "$d/stdout" "$d/stderr"
        # metrics' ages are measured against the clock at the time of the call.
        sed -i -E 's/(_age_seconds\{[^}]*\}) [0-9.e+-]+$/\1 AGE/' "$d/stdout"
        # top's header ends with the time of day.
        sed -i -E '1s/^(culedger top .*) · [0-9]{2}:[0-9]{2}:[0-9]{2}$/\1 · TIME/' "$d/stdout"
    done
    local bad="" f
    for f in stdout stderr rc out out.html; do
        if [ -e "$WORK/base/$f" ] || [ -e "$WORK/new/$f" ]; then
            cmp -s "$WORK/base/$f" "$WORK/new/$f" || bad="$bad $f"
        fi
    done
    if [ -n "$bad" ]; then
        differ=$((differ + 1))
        echo "DIFFERS ($bad ): $name"
        diff <(cat "$WORK/base/stdout" "$WORK/base/out" 2>/dev/null) <(cat "$WORK/new/stdout" "$WORK/new/out" 2>/dev/null) | head -10
    fi
}

for d in "${DIRS[@]}"; do
    d=${d%/}
    for f in text markdown json; do
        one "report $d $f" report "$d" --format $f
        one "report $d $f --all-categories" report "$d" --format $f --all-categories
        one "explain $d $f" explain "$d" --format $f
        one "check $d $f" check "$d" --budget 1GiB --format $f
        one "whatif $d $f" whatif "$d" --set mem_fraction_static=0.8 --format $f
    done
    one "report $d --brief" report "$d" --brief
    one "report $d --device 0" report "$d" --device 0
    one "check $d --no-failures" check "$d" --budget 80GiB --no-failures
    one "export $d --perfetto" export "$d" --perfetto OUT
    one "export $d --memory-viz" export "$d" --memory-viz OUT
    one "plot $d" plot "$d" -o OUT
    one "html $d" html "$d" -o OUT.html
    one "metrics $d" metrics "$d"
    one "metrics $d --sites" metrics "$d" --sites
    one "top --once $d" top --once "$d"
    for e in "${DIRS[@]}"; do
        e=${e%/}
        for f in text markdown json; do
            one "diff $d $e $f" diff "$d" "$e" --format $f
        done
        one "html $d $e" html "$d" "$e" -o OUT.html
    done
done
echo "$n outputs compared, $differ differ"
[ $differ -eq 0 ]
