#!/usr/bin/env bash
# Fetch NVIDIA's NVML header and Python bindings from PyPI into target/nvml:
#   include/nvml.h   from nvidia-nvml-dev 13.5.37 (the CUDA 13.5 release, as target/cuda13):
#                    the simulated NVML (shim-tests/fakenvml/fakenvml.c) is compiled against it,
#                    so its structures and signatures are NVIDIA's;
#   py/pynvml.py     from nvidia-ml-py 13.580.82 (driver 580's bindings): what SGLang and vLLM
#                    call NVML through, run by the NVML tests over the simulated NVML.
# About 200 KB of wheels, cached in target/nvml/wheels; returns at once when both are unpacked.
# NVIDIA's files are never committed: the wheels are the source of truth.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dev_ver=13.5.37
py_ver=13.580.82
out="$root/target/nvml"
stamp="nvidia-nvml-dev==$dev_ver nvidia-ml-py==$py_ver"
if [ -f "$out/include/nvml.h" ] && [ -f "$out/py/pynvml.py" ] && [ "$(cat "$out/.version" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
py=${PYTHON:-python3}
wheels="$out/wheels"
mkdir -p "$wheels"
fetch() { # package version file-prefix
    if ! ls "$wheels/$3-$2"-*.whl >/dev/null 2>&1; then
        "$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
            --python-version 3 --implementation py "$1==$2" -d "$wheels"
    fi
    ls "$wheels/$3-$2"-*.whl | head -n1
}
dev_whl=$(fetch nvidia-nvml-dev "$dev_ver" nvidia_nvml_dev)
py_whl=$(fetch nvidia-ml-py "$py_ver" nvidia_ml_py)
rm -rf "$out/include.tmp" "$out/py.tmp"
"$py" - "$out" "$dev_whl" "$py_whl" <<'PY'
import sys, zipfile, os
out, dev, pyw = sys.argv[1:]
def take(whl, member, dest):
    with zipfile.ZipFile(whl) as z:
        names = [n for n in z.namelist() if n.endswith(member)]
        if not names:
            sys.exit(f"fetch-nvml: no {member} in {whl}")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(names[0]) as src, open(dest, "wb") as dst:
            dst.write(src.read())
take(dev, "include/nvml.h", os.path.join(out, "include.tmp", "nvml.h"))
take(pyw, "pynvml.py", os.path.join(out, "py.tmp", "pynvml.py"))
PY
rm -rf "$out/include" "$out/py"
mv "$out/include.tmp" "$out/include"
mv "$out/py.tmp" "$out/py"
echo "$stamp" > "$out/.version"
echo "fetch-nvml: nvml.h ($dev_ver) in $out/include, pynvml ($py_ver) in $out/py" >&2
