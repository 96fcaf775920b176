#!/usr/bin/env bash
# `make valgrind`: the scenario programs of the simulated stack under culedger, with valgrind's
# memcheck (the release libculedger.so, as users run it: invalid accesses, uninitialised values,
# definite leaks) and helgrind (the same library built with the `valgrind` feature, whose locks
# announce themselves to helgrind; see src/sync.rs). Children (fork, exec) are followed.
# Suppressions, each with its reason: shim-tests/valgrind/culedger.supp. Exits 1 if any process
# of any scenario reports an error. Results: docs/reliability.md.
#   scripts/valgrind.sh [memcheck|helgrind]    one tool only
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SUPP=$ROOT/shim-tests/valgrind/culedger.supp
SIM=$ROOT/target/sim
command -v valgrind >/dev/null || { echo "valgrind: not installed (Debian: apt-get install valgrind)" >&2; exit 2; }
[ -x "$SIM/bin/rt_ledger" ] || { echo "valgrind: run 'make valgrind' (it builds first)" >&2; exit 2; }
echo "valgrind: building libculedger.so with the valgrind feature into target/valgrind"
CARGO_TARGET_DIR=target/valgrind ${CARGO:-cargo} build --release -q -p culedger --features valgrind
TOOLS=${1:-memcheck helgrind}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; rm -f /dev/shm/fakecuda-culedger-vg-$$-*' EXIT
export LD_LIBRARY_PATH=$SIM/lib

# "expected-exit-status program args..." per line; programs are in target/sim/bin or target/release.
MEMCHECK="0 rt_ledger basic
0 rt_ledger multi
0 rt_ledger threads 4 50
0 rt_ledger oom
0 rt_ledger fork
0 rt_ledger fork_exit
0 rt_ledger pinned
0 rt_ledger async
0 rt_ledger graph
0 rt_ledger ipc
0 rt_ledger peer
0 rt_ledger entry
0 drv_ledger basic
0 drv_badinput getproc
0 drv_badinput dlsym
0 static_ledger
0 stress 4 200 2
0 rt_sigkill loop 300
0 rt_sigkill window 200 1"
HELGRIND="0 rt_ledger threads 8 50
0 rt_ledger multi
0 rt_ledger fork
0 rt_ledger async
0 rt_ledger graph
42 rt_ledger sigexit
0 static_ledger
0 stress 8 150 2
0 rt_sigkill loop 300
0 rt_sigkill window 200 1"

failed=0
n=0
for tool in $TOOLS; do
    case $tool in
    memcheck)
        lib=$ROOT/target/release/libculedger.so
        list=$MEMCHECK
        flags="--leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite"
        ;;
    helgrind)
        lib=$ROOT/target/valgrind/release/libculedger.so
        list=$HELGRIND
        flags=""
        ;;
    *) echo "valgrind: unknown tool $tool" >&2; exit 2 ;;
    esac
    while read -r want prog args; do
        n=$((n + 1))
        exe=$SIM/bin/$prog
        [ -x "$exe" ] || exe=$ROOT/target/release/$prog
        log=$WORK/$tool-$n.log
        # stress forks while its other threads are inside culedger or the fake driver: a fork
        # child's leak check then finds the heap blocks those threads had in flight (a buffer
        # being filled, a thread-local record), which have no owner there since the threads do
        # not exist in the child. Its processes are checked for everything but leaks; the
        # single-threaded fork scenarios (rt_ledger fork, fork_exit) check a child's leaks.
        extra=""
        if [ "$tool" = memcheck ] && [ "$prog" = stress ]; then extra="--errors-for-leak-kinds=none"; fi
        set +e
        FAKECUDA_MACHINE=culedger-vg-$$-$n LD_PRELOAD=$lib CULEDGER_OUT=$WORK/out-$n CULEDGER_FLUSH_MS=20 \
            timeout 900 valgrind --tool="$tool" --num-callers=50 --trace-children=yes --error-exitcode=99 \
            --suppressions="$SUPP" $flags $extra "$exe" $args >"$log" 2>&1
        rc=$?
        set -e
        sum() { grep -h "ERROR SUMMARY" "$log" | sed -E "s/$1/\\1/" | awk '{s += $1} END {print s + 0}'; }
        errors=$(sum '.*ERROR SUMMARY: ([0-9]+) errors.*')
        suppressed=$(sum '.*suppressed: ([0-9]+) from.*')
        procs=$(grep -c "ERROR SUMMARY" "$log" || true)
        if [ "$rc" = "$want" ] && [ "${errors:-1}" = 0 ] && [ "$procs" -gt 0 ]; then
            printf 'valgrind: %-8s ok    %-26s %d process(es), 0 errors (%s suppressed)\n' "$tool" "$prog $args" "$procs" "${suppressed:-0}"
        else
            failed=1
            printf 'valgrind: %-8s FAIL  %-26s exit %s (expected %s), %s errors\n' "$tool" "$prog $args" "$rc" "$want" "${errors:-?}"
            # The errors themselves (each with its stacks), not the thread announcements before them.
            grep -E "^==[0-9]+== " "$log" | grep -E -A60 "Possible data race|lock order|unlocked|still holds|Invalid|uninitialised|definitely lost|Misc" | head -200 || true
        fi
    done <<<"$list"
done
exit $failed
