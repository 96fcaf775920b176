#!/usr/bin/env bash
# Fetch CUDA 13 from PyPI: the official headers (cuda.h, cudaTypedefs.h, cuda_runtime_api.h, ...)
# and NVIDIA's real libcudart.so.13, from the nvidia-cuda-runtime 13.x wheels, into
# target/cuda13/<version>/{include,lib}. Two releases:
#   13.0.96  the runtime PyTorch 2.11 (cu130) installs (cuda-toolkit[cudart]==13.0.2 pins it);
#   13.5.37  the newest 13.x: its headers are the superset the hook table is checked against.
# The wheels are cached under target/cuda-wheel; the script returns at once when everything is
# unpacked. Nothing here is committed: the files are NVIDIA's, the wheels are the source of truth.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
versions=(13.0.96 13.5.37)
wheel_dir="$root/target/cuda-wheel"
base="$root/target/cuda13"
py=${PYTHON:-python3}
complete() { # dir version
    [ -f "$1/.version" ] && [ "$(cat "$1/.version")" = "$2" ] && [ -f "$1/include/cuda.h" ] &&
        [ -f "$1/include/cudaTypedefs.h" ] && [ -f "$1/include/cuda_runtime_api.h" ] && [ -f "$1/lib/libcudart.so.13" ]
}
for ver in "${versions[@]}"; do
    out="$base/$ver"
    complete "$out" "$ver" && continue
    mkdir -p "$wheel_dir"
    if ! ls "$wheel_dir/nvidia_cuda_runtime-$ver"-*.whl >/dev/null 2>&1; then
        "$py" -m pip download --quiet --no-deps --only-binary=:all: \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
            --python-version 3 --implementation py "nvidia-cuda-runtime==$ver" -d "$wheel_dir"
    fi
    whl=$(ls "$wheel_dir/nvidia_cuda_runtime-$ver"-*.whl | head -n1)
    rm -rf "$out.tmp"
    mkdir -p "$out.tmp"
    "$py" - "$whl" "$out.tmp" <<'PY'
import os, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
jobs = (("nvidia/cu13/include/", "include/"), ("nvidia/cu13/lib/libcudart.so.13", "lib/libcudart.so.13"))
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        for prefix, to in jobs:
            if name.startswith(prefix) and not name.endswith("/"):
                path = os.path.join(dest, to + name[len(prefix):])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with z.open(name) as src, open(path, "wb") as dst:
                    dst.write(src.read())
for need in ("include/cuda.h", "include/cudaTypedefs.h", "include/cuda_runtime_api.h", "lib/libcudart.so.13"):
    if not os.path.exists(os.path.join(dest, need)):
        sys.exit(f"fetch-cuda13: {need} missing in {whl}")
PY
    echo "$ver" > "$out.tmp/.version"
    rm -rf "$out"
    mv "$out.tmp" "$out"
    echo "fetch-cuda13: CUDA $ver headers in $out/include, libcudart.so.13 in $out/lib" >&2
done
