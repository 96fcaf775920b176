#!/usr/bin/env bash
# Portable builds of libculedger.so and the culedger command line for any Linux with glibc
# 2.17 or newer (manylinux_2_17), linked by zig from PyPI, packaged as a wheel and a tarball.
#
#   scripts/package.sh tools          build tools into target/pkgtools (pip --target, no root)
#   scripts/package.sh lib ARCH...    target/zig/ARCH-unknown-linux-gnu/release/libculedger.so
#   scripts/package.sh wheel ARCH...  target/wheels/culedger-VER-py3-none-manylinux_2_17_ARCH.whl
#   scripts/package.sh dist ARCH...   the wheel, and target/dist/culedger-VER-ARCH-linux.tar.gz
#
# ARCH is x86_64 or aarch64 (default: both). VER is the Cargo workspace version. The tools
# are PyPI's maturin, ziglang (the zig toolchain) and cargo-zigbuild, pinned in scripts/zig-env.sh; the
# aarch64 Rust standard library comes from `rustup target add aarch64-unknown-linux-gnu`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/zig-env.sh
. "$root/scripts/zig-env.sh"

lib() { # ARCH: the interposer
    zigbuild "$1" -p culedger --lib
}

version() {
    cargo metadata --no-deps --format-version 1 |
        "$py" -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "culedger-cli"))'
}

wheel() { # ARCH: maturin builds the CLI (target/ARCH-unknown-linux-gnu/release/culedger)
    lib "$1"
    local staged="$root/python/culedger/libculedger.so"
    cp -f "target/zig/$1-unknown-linux-gnu/release/libculedger.so" "$staged"
    trap 'rm -f "$staged"' EXIT
    maturin build --release --zig --target "$1-unknown-linux-gnu" --compatibility "manylinux_${glibc/./_}" \
        --out target/wheels --quiet
    rm -f "$staged"
    trap - EXIT
}

dist() { # ARCH: the wheel's two binaries, the README and the docs
    wheel "$1"
    local ver name stage
    ver=$(version)
    name="culedger-$ver-$1-linux"
    stage="target/dist/$name"
    rm -rf "$stage"
    mkdir -p "$stage"
    cp "target/$1-unknown-linux-gnu/release/culedger" "target/zig/$1-unknown-linux-gnu/release/libculedger.so" \
        README.md "$stage/"
    cp -r docs "$stage/docs"
    tar -C target/dist -czf "target/dist/$name.tar.gz" --owner=0 --group=0 "$name"
    rm -rf "$stage"
    echo "package: target/dist/$name.tar.gz" >&2
}

cmd=${1:-}
shift || true
[ $# -gt 0 ] || set -- x86_64 aarch64
case "$cmd" in
tools) zig_tools ;;
lib | wheel | dist)
    zig_tools
    for arch in "$@"; do
        case "$arch" in x86_64 | aarch64) ;; *) echo "package: unknown ARCH $arch (x86_64, aarch64)" >&2; exit 2 ;; esac
        "$cmd" "$arch"
    done
    ;;
*) echo "usage: scripts/package.sh tools | lib|wheel|dist [x86_64] [aarch64]" >&2; exit 2 ;;
esac
