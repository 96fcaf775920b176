#!/usr/bin/env bash
# Fetch the official CUDA 12.9 headers (cuda.h, cuda_runtime_api.h, ...) from the
# PyPI wheel nvidia-cuda-runtime-cu12==12.9.79 and unpack them under
# target/cuda-headers/include. cuda_runtime_api.h includes crt/host_defines.h, which
# NVIDIA ships in the compiler wheel of the same release (nvidia-cuda-nvcc-cu12==12.9.86):
# only its include/crt/ is unpacked. The real libcudart.so.12 of the runtime wheel goes to
# target/cuda-headers/lib/: the tests run it (on the fake driver) under culedger.
# The wheels are cached under target/cuda-wheel.
# The headers are never committed: they are NVIDIA's, and the wheel is the source of truth.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ver=12.9.79
nvcc_ver=12.9.86
wheel_dir="$root/target/cuda-wheel"
out="$root/target/cuda-headers"
if [ -f "$out/include/cuda.h" ] && [ -f "$out/.version" ] && [ -f "$out/include/crt/host_defines.h" ] && [ -f "$out/lib/libcudart.so.12" ] && [ "$(cat "$out/.version")" = "$ver" ]; then
    exit 0
fi
mkdir -p "$wheel_dir"
py=${PYTHON:-python3}
fetch() { # package version file-prefix
    if ! ls "$wheel_dir/$3-$2"-*.whl >/dev/null 2>&1; then
        "$py" -m pip download --quiet --no-deps --only-binary=:all: \
            --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
            --python-version 3 --implementation py "$1==$2" -d "$wheel_dir"
    fi
    ls "$wheel_dir/$3-$2"-*.whl | head -n1
}
rt_whl=$(fetch nvidia-cuda-runtime-cu12 "$ver" nvidia_cuda_runtime_cu12)
nvcc_whl=$(fetch nvidia-cuda-nvcc-cu12 "$nvcc_ver" nvidia_cuda_nvcc_cu12)
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
# (wheel, member prefix, destination prefix) triples.
"$py" - "$out.tmp" \
    "$rt_whl" nvidia/cuda_runtime/include/ include/ \
    "$nvcc_whl" nvidia/cuda_nvcc/include/crt/ include/crt/ \
    "$rt_whl" nvidia/cuda_runtime/lib/libcudart.so.12 lib/libcudart.so.12 <<'PY'
import sys, zipfile, os
dest, jobs = sys.argv[1], sys.argv[2:]
for whl, prefix, to in zip(jobs[::3], jobs[1::3], jobs[2::3]):
    n = 0
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                path = os.path.join(dest, to + name[len(prefix):])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with z.open(name) as src, open(path, "wb") as dst:
                    dst.write(src.read())
                n += 1
    if n == 0:
        sys.exit(f"fetch-cuda-headers: nothing under {prefix} in {whl}")
for need in ("include/cuda.h", "include/cuda_runtime_api.h", "include/cudaTypedefs.h",
             "include/crt/host_defines.h", "lib/libcudart.so.12"):
    if not os.path.exists(os.path.join(dest, need)):
        sys.exit(f"fetch-cuda-headers: {need} missing after unpacking")
PY
echo "$ver" > "$out.tmp/.version"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "fetch-cuda-headers: CUDA $ver headers in $out/include, libcudart.so.12 in $out/lib" >&2
