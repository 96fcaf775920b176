#!/usr/bin/env bash
# Set up extra CPython interpreters (and their headers) for the call-site tests, without root:
#   target/pythons/3.13/  Debian trixie's python3.13 (+ libpython3.13-dev for the headers)
#   target/pythons/3.14/  Debian sid's python3.14 (+ libpython3.14-dev), when its packages run here
# Each ROOT gets the packages unpacked (dpkg-deb -x), its own glibc (the distribution's libc6) and
# a launcher `ROOT/python` that runs the interpreter with that glibc's loader:
#   ld-linux-x86-64.so.2 --library-path ROOT/usr/lib/x86_64-linux-gnu ROOT/usr/bin/python3.X
# with PYTHONHOME=ROOT/usr (and $LD_LIBRARY_PATH appended to --library-path, which replaces it). The packages come from Debian's archive through `apt-get download`
# against a private sources list and state directory under target/pythons/apt (the system's
# apt configuration is not touched). Idempotent: a ROOT whose `python` launcher works is kept.
# A version whose packages cannot be fetched or do not run is skipped with one line on stderr
# (the tests use whatever interpreters are present). Set CULEDGER_NO_FETCH_PYTHONS=1 to skip.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base="$root/target/pythons"
[ "${CULEDGER_NO_FETCH_PYTHONS:-}" = 1 ] && exit 0
[ "$(uname -m)" = x86_64 ] || exit 0
command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 || {
    echo "fetch-pythons: apt-get/dpkg-deb not found; only the system's Python is tested" >&2
    exit 0
}
mkdir -p "$base"

# (version, Debian suite)
want=("3.13 trixie" "3.14 sid")

works() { # ROOT VER
    [ -x "$1/python" ] && "$1/python" -c "import ctypes, sys, threading; assert sys.version_info[:2] == tuple(map(int, '$2'.split('.')))" \
        >/dev/null 2>&1
}

apt_dir="$base/apt"
apt_opts() { # suite
    echo "-o Dir::Etc::SourceList=$apt_dir/$1.list -o Dir::Etc::SourceParts=/dev/null -o Dir::Etc::Parts=$apt_dir/empty" \
        "-o Dir::State=$apt_dir/state-$1 -o Dir::State::Lists=$apt_dir/lists-$1 -o Dir::Cache=$apt_dir/cache-$1" \
        "-o Dir::State::status=$apt_dir/empty-status -o Debug::NoLocking=1 -o Acquire::Languages=none" \
        "-o APT::Architecture=amd64 -o APT::Architectures=amd64 -o APT::Sandbox::User=root"
}

setup() { # VER SUITE
    local ver=$1 suite=$2 dest="$base/$1" tmp
    if works "$dest" "$ver"; then
        return 0
    fi
    mkdir -p "$apt_dir/empty" "$apt_dir/lists-$suite/partial" "$apt_dir/cache-$suite/archives/partial" "$apt_dir/state-$suite"
    : > "$apt_dir/empty-status"
    echo "deb [trusted=yes] http://deb.debian.org/debian $suite main" > "$apt_dir/$suite.list"
    # shellcheck disable=SC2046
    if ! apt-get $(apt_opts "$suite") -qq update >"$apt_dir/update-$suite.log" 2>&1; then
        echo "fetch-pythons: cannot read Debian $suite's package list (see $apt_dir/update-$suite.log); Python $ver is not tested" >&2
        return 1
    fi
    tmp="$base/.debs-$ver"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    local pkgs=("python$ver-minimal" "libpython$ver-minimal" "libpython$ver-stdlib" "libpython$ver-dev" libc6 libffi8 libexpat1 zlib1g)
    # shellcheck disable=SC2046
    if ! (cd "$tmp" && apt-get $(apt_opts "$suite") -qq download "${pkgs[@]}" >"$apt_dir/download-$ver.log" 2>&1); then
        echo "fetch-pythons: cannot download Python $ver from Debian $suite (see $apt_dir/download-$ver.log); not tested" >&2
        return 1
    fi
    rm -rf "$dest.tmp"
    mkdir -p "$dest.tmp"
    for deb in "$tmp"/*.deb; do
        dpkg-deb -x "$deb" "$dest.tmp" || { echo "fetch-pythons: cannot unpack $deb" >&2; return 1; }
    done
    local loader
    loader=$(ls "$dest.tmp"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$dest.tmp"/lib64/ld-linux-x86-64.so.2 2>/dev/null | head -n1)
    [ -n "$loader" ] || { echo "fetch-pythons: no loader in Debian $suite's libc6" >&2; return 1; }
    # The launcher: the interpreter under its own distribution's glibc. Paths are relative to
    # the launcher, so the directory may move.
    cat > "$dest.tmp/python" <<EOF
#!/bin/sh
r=\$(cd "\$(dirname "\$0")" && pwd)
PYTHONHOME="\$r/usr" exec "\$r/${loader#"$dest.tmp/"}" --library-path "\$r/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" "\$r/usr/bin/python$ver" "\$@"
EOF
    chmod +x "$dest.tmp/python"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
    rm -rf "$tmp"
    if ! works "$dest" "$ver"; then
        echo "fetch-pythons: Debian $suite's Python $ver does not run here; not tested" >&2
        mv "$dest" "$dest.broken" 2>/dev/null || true
        return 1
    fi
    echo "fetch-pythons: Python $ver (Debian $suite) in $dest" >&2
}

for w in "${want[@]}"; do
    # shellcheck disable=SC2086
    setup $w || true
done
exit 0
