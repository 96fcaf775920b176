# shellcheck shell=bash
# Sourced by scripts/package.sh and scripts/aarch64.sh: the zig toolchain from PyPI and the
# settings every zig build shares (so their outputs in target/zig/ are reused, not rebuilt).
# Needs $root (the repository) and $PYTHON (default python3).
: "${root:?scripts/zig-env.sh needs \$root}"
py=${PYTHON:-python3}
tools="$root/target/pkgtools"
pins="maturin==1.16.0 ziglang==0.17.1 cargo-zigbuild==0.24.0"   # cargo-zigbuild: the one maturin 1.16 embeds
glibc=2.17

# maturin, ziglang (the zig executable is inside the wheel) and cargo-zigbuild, installed with
# `pip install --target` (no venv module, no root); put on PATH.
zig_tools() {
    if [ "$(cat "$tools/.pins" 2>/dev/null)" != "$pins" ]; then
        rm -rf "$tools"
        # shellcheck disable=SC2086
        "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$tools" $pins
        echo "$pins" > "$tools/.pins"
    fi
    export PATH="$tools/bin:$tools/ziglang:$PATH" PYTHONPATH="$tools${PYTHONPATH:+:$PYTHONPATH}"
}

# Release builds without debug info (the symbol table stays: backtraces keep their names).
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=debuginfo

# The Rust standard library for ARCH-unknown-linux-gnu (rustup; a no-op when present).
need_target() {
    local t="$1-unknown-linux-gnu"
    if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$t"; then
        rustup target add "$t"
    fi
}

# cargo zigbuild for ARCH against glibc 2.17's symbol versions, into target/zig/ (its own
# target directory: maturin's CLI build links through another zig wrapper, and sharing one
# would make each build invalidate the other's dependencies). Further arguments go to cargo.
zigbuild() {
    local arch=$1
    shift
    need_target "$arch"
    CARGO_TARGET_DIR="$root/target/zig" cargo zigbuild --release --target "$arch-unknown-linux-gnu.$glibc" "$@"
}
