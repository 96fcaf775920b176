#!/usr/bin/env bash
# Fetch the official CUDA 12.9 headers (cuda.h, cuda_runtime_api.h, ...) from the
# PyPI wheel nvidia-cuda-runtime-cu12==12.9.79 and unpack them under
# target/cuda-headers/include. The wheel is cached under target/cuda-wheel.
# The headers are never committed: they are NVIDIA's, and the wheel is the source of truth.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ver=12.9.79
wheel_dir="$root/target/cuda-wheel"
out="$root/target/cuda-headers"
if [ -f "$out/include/cuda.h" ] && [ -f "$out/.version" ] && [ "$(cat "$out/.version")" = "$ver" ]; then
    exit 0
fi
mkdir -p "$wheel_dir"
py=${PYTHON:-python3}
if ! ls "$wheel_dir"/nvidia_cuda_runtime_cu12-"$ver"-*.whl >/dev/null 2>&1; then
    "$py" -m pip download --quiet --no-deps --only-binary=:all: \
        --platform manylinux2014_x86_64 --python-version 3 --implementation py \
        "nvidia-cuda-runtime-cu12==$ver" -d "$wheel_dir"
fi
whl=$(ls "$wheel_dir"/nvidia_cuda_runtime_cu12-"$ver"-*.whl | head -n1)
rm -rf "$out.tmp"
mkdir -p "$out.tmp/include"
"$py" - "$whl" "$out.tmp/include" <<'PY'
import sys, zipfile, os
whl, dest = sys.argv[1], sys.argv[2]
prefix = "nvidia/cuda_runtime/include/"
n = 0
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            rel = name[len(prefix):]
            path = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(name) as src, open(path, "wb") as dst:
                dst.write(src.read())
            n += 1
if n == 0 or not os.path.exists(os.path.join(dest, "cuda.h")):
    sys.exit("fetch-cuda-headers: the wheel has no include/cuda.h")
PY
echo "$ver" > "$out.tmp/.version"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "fetch-cuda-headers: CUDA $ver headers in $out/include" >&2
