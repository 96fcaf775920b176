#!/usr/bin/env bash
# culedger on aarch64 (Grace Hopper), without an aarch64 machine: the interposer, the
# simulated CUDA stack and the scenario programs cross-built by zig, run under qemu-user.
#
#   scripts/aarch64.sh build     target/zig/aarch64-unknown-linux-gnu/release/{libculedger.so,static_ledger,...}
#                                and target/aarch64/sim/{lib,bin} (the fakes and the C scenarios)
#   scripts/aarch64.sh runtime   target/aarch64/root: qemu-aarch64-static and an arm64 glibc, from
#                                Debian's qemu-user-static, libc6-arm64-cross and libgcc-s1-arm64-cross
#                                (`apt-get download`: no root; root only runs `apt-get update` when
#                                the package lists are empty)
#   scripts/aarch64.sh test      both, then the interposer's integration tests (the native test
#                                harness runs each scenario program under qemu-aarch64-static)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/zig-env.sh
. "$root/scripts/zig-env.sh"
arch=aarch64
rel="$root/target/zig/$arch-unknown-linux-gnu/release"
sim="$root/target/aarch64/sim"
rt="$root/target/aarch64/root"
hdr="$root/target/cuda-headers/include"
debs="qemu-user-static libc6-arm64-cross libgcc-s1-arm64-cross"

# The interposer's integration tests that run on aarch64: every resolution path (exported
# symbols, dlsym on a handle, cuGetProcAddress from the runtime and from a static runtime),
# the dlsym tail jump under a second interposer's RTLD_NEXT, threads, fork, exit paths,
# SIGKILL and the report. (The Python-driven ones need an arm64 CPython: not here.)
tests="dynamic_runtime_allocations_frees_probes_and_copies results_and_exit_codes_identical_without_preload
several_devices_are_kept_apart many_threads_give_exact_totals failed_allocation_is_recorded_with_the_ledger_and_last_probe
async_allocations_legacy_and_per_thread_stream capture_flags_allocations_and_instantiation_is_measured
ipc_export_moves_the_allocation_to_ipc_once peer_access_cost_is_measured pinned_host_memory_has_its_own_ledger
driver_entry_points_from_the_runtime_count_once malformed_settings_warn_once_and_use_defaults
unwritable_output_directory_warns_and_the_program_is_unharmed fork_child_starts_a_clean_ledger_of_its_own
exit_from_a_signal_handler_inside_a_hook_never_hangs sigkill_loses_at_most_one_flush_interval driver_api_direct
pitched_allocation_counts_pitch_times_height driver_managed_pinned_pool_module_capture_and_instantiate
vmm_physical_memory_counts_until_release get_proc_address_wraps_v2_and_passes_v1_through
another_interposer_keeps_its_rtld_next static_runtime_is_seen_through_dlsym_and_the_resolver"

build() {
    zig_tools
    PYTHON=$py "$root/scripts/fetch-cuda-headers.sh"
    zigbuild "$arch" -p culedger -p fakecuda -p fakecudart -p culedger-scenarios --lib --bins
    mkdir -p "$sim/lib" "$sim/bin"
    cp -f "$rel/libfakecuda.so" "$sim/lib/libcuda.so.1"
    ln -sf libcuda.so.1 "$sim/lib/libcuda.so"
    cp -f "$rel/libfakecudart.so" "$sim/lib/libcudart.so.12"
    ln -sf libcudart.so.12 "$sim/lib/libcudart.so"
    # The C scenarios and helper libraries, as the Makefile builds them natively. The fake
    # driver uses memfd_create (glibc 2.27), which the 2.17 link stubs lack: the programs
    # leave it to the loader, and the arm64 glibc they run on (2.36) has it.
    # shellcheck disable=SC2054  # the commas belong to -Wl options
    local cc=(zig cc -target "$arch-linux-gnu.$glibc" -O1 -g -Wall -Wextra -Werror -I"$hdr" -Ishim-tests/c
        -Wl,--allow-shlib-undefined)
    local src out
    for src in shim-tests/interposers/*.c; do
        out="$sim/lib/lib$(basename "$src" .c).so"
        [ "$out" -nt "$src" ] || "${cc[@]}" -fPIC -shared -o "$out" "$src" -ldl
    done
    for src in shim-tests/c/*.c; do
        out="$sim/bin/$(basename "$src" .c)"
        [ "$out" -nt "$src" ] && [ "$out" -nt shim-tests/c/sim.h ] && [ "$out" -nt "$sim/lib/libcuda.so.1" ] && continue
        # shellcheck disable=SC2016  # $ORIGIN is for the loader
        case "$(basename "$src")" in
        drv_*) "${cc[@]}" -o "$out" "$src" "$sim/lib/libcuda.so.1" -lpthread -Wl,-rpath,'$ORIGIN/../lib' ;;
        *) "${cc[@]}" -o "$out" "$src" "$sim/lib/libcudart.so.12" -lpthread -Wl,-rpath,'$ORIGIN/../lib' ;;
        esac
    done
}

runtime() {
    if [ -x "$rt/usr/bin/qemu-aarch64-static" ] && [ -f "$rt/usr/aarch64-linux-gnu/lib/libgcc_s.so.1" ]; then
        return
    fi
    local dl="$root/target/aarch64/debs"
    mkdir -p "$dl"
    # shellcheck disable=SC2086
    if ! (cd "$dl" && apt-get download -q $debs 2>&1); then
        if [ "$(id -u)" = 0 ]; then
            apt-get update -qq
            # shellcheck disable=SC2086
            (cd "$dl" && apt-get download -q $debs)
        else
            echo "aarch64: apt-get download $debs failed; the package lists may be empty (as root: apt-get update)" >&2
            exit 1
        fi
    fi
    rm -rf "$rt.tmp"
    mkdir -p "$rt.tmp"
    local d
    for d in "$dl"/*.deb; do
        case "$(basename "$d")" in
        qemu-user-static_*) dpkg-deb --fsys-tarfile "$d" | tar -x -C "$rt.tmp" ./usr/bin/qemu-aarch64-static ;;
        *) dpkg-deb -x "$d" "$rt.tmp" ;;
        esac
    done
    rm -rf "$rt"
    mv "$rt.tmp" "$rt"
    rm -rf "$dl"
}

case "${1:-}" in
build) build ;;
runtime) runtime ;;
test)
    build
    runtime
    # shellcheck disable=SC2086
    CULEDGER_SIM_DIR="$sim" CULEDGER_BUILD_DIR="$rel" \
        CULEDGER_SIM_RUNNER="$rt/usr/bin/qemu-aarch64-static -L $rt/usr/aarch64-linux-gnu" \
        cargo test --release -p culedger-scenarios --test interposer -- --exact $tests
    ;;
*) echo "usage: scripts/aarch64.sh build | runtime | test" >&2; exit 2 ;;
esac
